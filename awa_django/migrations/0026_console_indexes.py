"""Three indexes of ``awa_job_done`` for the console at 20 M rows a day (issue 43, docs/storage.md
"The console at scale"):

- ``awa_job_done_finalized_id_idx (finalized_at) INCLUDE (id)`` and
  ``awa_job_done_created_id_idx (created_at) INCLUDE (id)`` replace ``awa_job_done_finalized_idx``
  and ``awa_job_done_created_idx``. A one-hour time filter's page is the newest ids among the hour's
  jobs: with the id in the index, sorting them reads index entries only (at 230 jobs/s, 830,000 of
  them), not each job's row. Every other use of the two indexes (the history rollup's minutes, the
  failures page, retention) reads the same leading column as before.
- ``awa_job_done_failed_queue_idx (queue) WHERE state = 'failed'``, on the failed branch: the
  dashboard's, the queue list's and ``awa_health``'s count of a queue's failed jobs (stopped at
  10,001) is an index-only scan that stops there. Through ``(queue, id)`` the planner read a bitmap
  of every failed and cancelled job of the queue before counting.

Built on a live table: each partitioned index is created on its parent alone (``ON ONLY``, invalid
until complete), and on each range partition ``CONCURRENTLY`` and attached, so completions and
claims go on meanwhile. A partition the leader creates during the build gets the index from its
parent when it is attached; one it drops is skipped. The old indexes are then dropped: a
partitioned index has no ``DROP INDEX CONCURRENTLY``, so the drop takes the table's ACCESS
EXCLUSIVE lock for the milliseconds of a catalog change, asked with a 200 ms ``lock_timeout`` (the
leader's, for its partitions) and asked again, so that a long console query never queues every
completion behind it. The migration is not atomic: interrupted, it leaves valid indexes and
perhaps an invalid one, which the next run drops and builds again. Unapplied, the old indexes are
built back the same way.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import migrations

LOCK_TIMEOUT = "200ms"
PASSES = 3  # passes over the partitions: one, and two more for ranges the leader attached meanwhile
DROP_ATTEMPTS = 300  # a 200 ms wait and a 100 ms pause each: a minute and a half of busy locks at most

# name: (table, definition after the table, suffix of each partition's index name)
NEW = {
    "awa_job_done_finalized_id_idx": ("awa_job_done", "(finalized_at) INCLUDE (id)", "finalized_at_id_idx"),
    "awa_job_done_created_id_idx": ("awa_job_done", "(created_at) INCLUDE (id)", "created_at_id_idx"),
    "awa_job_done_failed_queue_idx": ("awa_job_done_failed", "(queue) WHERE state = 'failed'", "queue_idx"),
}
OLD = {
    "awa_job_done_finalized_idx": ("awa_job_done", "(finalized_at)", "finalized_at_idx"),
    "awa_job_done_created_idx": ("awa_job_done", "(created_at)", "created_at_idx"),
}

UNDEFINED_TABLE = "42P01"
LOCK_NOT_AVAILABLE = "55P03"


def _sqlstate(error: BaseException) -> str | None:
    cause = error.__cause__ or error
    return getattr(cause, "sqlstate", None)


def _child_index(cursor: Any, parent_index: str, table: str) -> tuple[str, bool] | None:
    """The index of ``table`` attached to ``parent_index``, and whether it is valid."""
    cursor.execute(
        """
        SELECT c.relname, x.indisvalid
        FROM pg_inherits AS h
        JOIN pg_class AS c ON c.oid = h.inhrelid
        JOIN pg_index AS x ON x.indexrelid = c.oid
        WHERE h.inhparent = %s::regclass AND x.indrelid = %s::regclass
        """,
        [parent_index, table],
    )
    row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


def _valid(cursor: Any, index: str) -> bool | None:
    """Whether ``index`` is valid; None when there is no such index."""
    cursor.execute("SELECT x.indisvalid FROM pg_index AS x WHERE x.indexrelid = to_regclass(%s)", [index])
    row = cursor.fetchone()
    return None if row is None else bool(row[0])


def build(cursor: Any, name: str, table: str, definition: str, suffix: str) -> None:
    """The partitioned index ``name`` on ``table`` and every partition below it, built without
    blocking writes: ON ONLY each partitioned table, CONCURRENTLY on each leaf, each attached."""
    if _valid(cursor, name):
        return
    cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON ONLY {table} {definition}")
    for _ in range(PASSES):
        _attach_partitions(cursor, name, table, definition, suffix)
        if _valid(cursor, name):
            return
    raise RuntimeError(
        f"the index {name} on {table} is still invalid after {PASSES} passes over its partitions "
        "(partitions were being created meanwhile): run 'manage.py migrate awa' again"
    )


def _attach_partitions(cursor: Any, name: str, table: str, definition: str, suffix: str) -> None:
    """One pass over the partitions below ``table``: each one's index built (a leaf's CONCURRENTLY)
    and attached, unless attached already."""
    cursor.execute(
        "SELECT relid::text, parentrelid::text, isleaf FROM pg_partition_tree(%s::regclass) "
        "WHERE level > 0 ORDER BY level, relid::text",
        [table],
    )
    index_of = {table: name}
    for relation, parent, leaf in cursor.fetchall():
        parent_index = index_of.get(parent)
        if parent_index is None:  # its parent was dropped meanwhile
            continue
        try:
            attached = _child_index(cursor, parent_index, relation)
            if attached is not None:
                # Attached already: by an earlier pass, or by the ATTACH PARTITION of a range the
                # leader created since the parent's index (a partitioned table's index is valid
                # once each of its partitions' is: its leaves come later in this pass).
                index_of[relation] = attached[0]
                continue
            index = f"{relation}_{suffix}"
            if leaf:
                if _valid(cursor, index) is False:  # left invalid by an interrupted build
                    cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
                cursor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {relation} {definition}")
            else:
                cursor.execute(f"CREATE INDEX IF NOT EXISTS {index} ON ONLY {relation} {definition}")
            cursor.execute(f"ALTER INDEX {parent_index} ATTACH PARTITION {index}")
            index_of[relation] = index
        except Exception as error:
            if _sqlstate(error) == UNDEFINED_TABLE:  # a range partition the leader dropped meanwhile
                continue
            raise


def drop(cursor: Any, name: str) -> None:
    """DROP INDEX ``name`` (partitioned: no CONCURRENTLY), its lock asked for at most 200 ms at a time."""
    cursor.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    try:
        for _ in range(DROP_ATTEMPTS):
            try:
                cursor.execute(f"DROP INDEX IF EXISTS {name}")
                return
            except Exception as error:
                if _sqlstate(error) != LOCK_NOT_AVAILABLE:
                    raise
                time.sleep(0.1)
        raise RuntimeError(
            f"DROP INDEX {name}: its table's lock stayed busy for {DROP_ATTEMPTS} tries of {LOCK_TIMEOUT}; "
            "run 'manage.py migrate awa' again when long queries on awa_job_done are over"
        )
    finally:
        cursor.execute("RESET lock_timeout")


def forwards(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        for name, spec in NEW.items():
            build(cursor, name, *spec)
        for name in OLD:
            drop(cursor, name)


def backwards(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        for name, spec in OLD.items():
            build(cursor, name, *spec)
        for name in NEW:
            drop(cursor, name)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction.
    atomic = False

    dependencies = [
        ("awa", "0025_durable_steps"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
