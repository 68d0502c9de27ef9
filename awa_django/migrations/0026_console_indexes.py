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

import random
import time
from typing import Any

from django.db import migrations

LOCK_TIMEOUT = "200ms"
PASSES = 3  # passes over the partitions: one, and two more for ranges the leader attached meanwhile
LOCK_BUDGET = 600.0  # seconds a statement's lock may stay busy before the migration gives up
PAUSE_FIRST, PAUSE_MAX = 0.1, 5.0  # seconds between tries, doubling: writers wait 200 ms a try at most

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
    for fresh in (False, True):
        locked(cursor, f"CREATE INDEX IF NOT EXISTS {name} ON ONLY {table} {definition}")
        for _ in range(PASSES):
            if not _attach_partitions(cursor, name, table, definition, suffix):
                break  # every partition's index is attached, and the index is still invalid
            if _valid(cursor, name):
                return
        if fresh:
            break
        # Only an ATTACH validates a partitioned index: one whose last missing partition was
        # dropped after the last ATTACH stays invalid with nothing left to attach. Built again.
        drop(cursor, name)
    raise RuntimeError(
        f"the index {name} on {table} is still invalid after {PASSES} passes over its partitions "
        "(partitions were created or dropped meanwhile): run 'manage.py migrate awa' again"
    )


def _attach_partitions(cursor: Any, name: str, table: str, definition: str, suffix: str) -> bool:
    """One pass over the partitions below ``table``: each one's index built (a leaf's CONCURRENTLY)
    and attached, unless attached already. Whether it attached any."""
    cursor.execute(
        "SELECT relid::text, parentrelid::text, isleaf FROM pg_partition_tree(%s::regclass) "
        "WHERE level > 0 ORDER BY level, relid::text",
        [table],
    )
    index_of = {table: name}
    attached_any = False
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
                locked(cursor, f"CREATE INDEX IF NOT EXISTS {index} ON ONLY {relation} {definition}")
            locked(cursor, f"ALTER INDEX {parent_index} ATTACH PARTITION {index}")
            index_of[relation] = index
            attached_any = True
        except Exception as error:
            if _sqlstate(error) == UNDEFINED_TABLE:  # a range partition the leader dropped meanwhile
                continue
            raise
    return attached_any


def locked(cursor: Any, statement: str) -> None:
    """Run ``statement``, whose lock would queue writers behind it while it waits, asking for that
    lock 200 ms at a time (``lock_timeout``), with pauses doubling from 0.1 s to 5 s and jittered
    between tries, for LOCK_BUDGET seconds at most. For the statements that take a lock writers
    wait for: CREATE INDEX ON ONLY a table (SHARE), ALTER INDEX ATTACH PARTITION (the one that
    completes a partitioned index validates it, taking its table ACCESS EXCLUSIVE), DROP INDEX of a
    partitioned index (ACCESS EXCLUSIVE). A CONCURRENTLY build takes none and runs without it."""
    pause = PAUSE_FIRST
    deadline = time.monotonic() + LOCK_BUDGET
    cursor.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    try:
        while True:
            try:
                cursor.execute(statement)
                return
            except Exception as error:
                if _sqlstate(error) != LOCK_NOT_AVAILABLE:
                    raise
                if time.monotonic() + pause > deadline:
                    raise RuntimeError(
                        f"{statement}: the lock it needs stayed busy for {LOCK_BUDGET:.0f} s (asked for "
                        f"{LOCK_TIMEOUT} at a time); run 'manage.py migrate awa' again when the long "
                        "queries or transactions on awa_job_done are over"
                    ) from error
                time.sleep(pause * random.uniform(0.5, 1.0))
                pause = min(pause * 2, PAUSE_MAX)
    finally:
        cursor.execute("RESET lock_timeout")


def drop(cursor: Any, name: str) -> None:
    """DROP INDEX ``name``: a partitioned index has no CONCURRENTLY."""
    locked(cursor, f"DROP INDEX IF EXISTS {name}")


def replace(schema_editor: Any, built: dict[str, tuple[str, str, str]], dropped: dict[str, Any]) -> None:
    """Build the ``built`` indexes, then drop the ``dropped`` ones."""
    with schema_editor.connection.cursor() as cursor:
        for name, spec in built.items():
            build(cursor, name, *spec)
        for name in dropped:
            drop(cursor, name)


def forwards(apps: Any, schema_editor: Any) -> None:
    replace(schema_editor, NEW, OLD)


def backwards(apps: Any, schema_editor: Any) -> None:
    replace(schema_editor, OLD, NEW)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction.
    atomic = False

    dependencies = [
        ("awa", "0025_durable_steps"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
