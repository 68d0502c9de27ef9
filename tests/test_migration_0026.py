"""Migration 0026 (issue 43, the console at 20 M rows a day) builds three partitioned indexes of
``awa_job_done`` on a table that already holds history in several range partitions, without a
lock that stops writes: ON ONLY each partitioned table, CONCURRENTLY on each leaf, each attached.
It must leave every index valid with one child per partition (a partition the leader attached
during the build included), drop the two it replaces, and run backwards and forwards again.

The database is the test's own on the shared server (tests/test_upgrade.py's ``upgrade_database``),
migrated by ``manage.py`` in a subprocess as a deploy runs it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql

from tests.conftest import connect_outside_django
from tests.harness import ROOT, wait_until
from tests.test_upgrade import manage, process_env, upgrade_database, value

migration = importlib.import_module("awa_django.migrations.0026_console_indexes")

NEW = sorted(migration.NEW)
OLD = sorted(migration.OLD)
FINALIZED = "awa_job_done_finalized_id_idx"

# Finished jobs written straight into awa_job_done, finished over the last three days.
HISTORY_SQL = """
INSERT INTO awa_job_done (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at,
                          finalized_at, created_at, errors, metadata, tags, run_lease, fair_key, pending)
SELECT nextval(pg_get_serial_sequence('awa_job', 'id')), 'k', 'q' || (g % 3), '{}'::jsonb,
       (ARRAY['completed', 'failed', 'cancelled'])[1 + g % 3], 2, 1, 25, t.at, t.at, t.at, t.at,
       '[]'::jsonb, '{}'::jsonb, '{}', 1, '', 0
FROM generate_series(1, 3000) AS g,
LATERAL (SELECT now() - interval '1 minute' * g AS at) AS t
"""


def day_partition(conn: psycopg.Connection[Any], branch: str, lower: datetime) -> str:
    """A day's range partition of ``branch``, created and attached as the leader's retention does
    (CREATE TABLE ... LIKE, then ATTACH PARTITION)."""
    name = f"{branch}_{lower:%Y%m%d}"
    conn.execute(
        sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
            sql.Identifier(name), sql.Identifier(branch)
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier(branch), sql.Identifier(name), sql.Literal(lower), sql.Literal(lower + timedelta(days=1))
        )
    )
    return name


def leaves(conn: psycopg.Connection[Any], table: str) -> set[str]:
    rows = conn.execute("SELECT relid::text FROM pg_partition_tree(%s::regclass) WHERE isleaf", [table]).fetchall()
    return {row[0] for row in rows}


def index_state(conn: psycopg.Connection[Any], name: str) -> tuple[bool, set[str]] | None:
    """(valid, the tables of its leaf indexes) of a partitioned index; None when it does not exist."""
    valid = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name]).fetchone()
    if valid is None:
        return None
    rows = conn.execute(
        "SELECT x.indrelid::regclass::text FROM pg_partition_tree(%s::regclass) AS t "
        "JOIN pg_index AS x ON x.indexrelid = t.relid WHERE t.isleaf",
        [name],
    ).fetchall()
    return bool(valid[0]), {row[0] for row in rows}


def explain(conn: psycopg.Connection[Any], query: LiteralString) -> str:
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + query))


def assert_complete(conn: psycopg.Connection[Any], names: list[str]) -> None:
    """Each index valid, with one index on every leaf partition of its table."""
    for name in names:
        table = (migration.NEW | migration.OLD)[name][0]
        state = index_state(conn, name)
        assert state is not None, f"{name} is missing"
        assert state == (True, leaves(conn, table)), (name, state, leaves(conn, table))


@pytest.mark.slow  # four migrate runs in subprocesses: 30-40 s
@pytest.mark.db  # a database of its own on the shared server, outside pytest-django
@pytest.mark.subprocess
def test_migration_0026__builds_on_history_and_a_partition_attached_meanwhile__and_back() -> None:
    with upgrade_database() as dbname:
        manage(dbname, "migrate", "awa", "0025", "-v", "0")
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        with connect_outside_django(dbname) as conn:
            conn.autocommit = True
            for branch in ("awa_job_done_completed", "awa_job_done_failed"):
                for days in (1, 2, 3):
                    day_partition(conn, branch, today - timedelta(days=days))
            day_partition(conn, "awa_job_done_completed", today)
            conn.execute(HISTORY_SQL)  # today's failed jobs land in the failed branch's default
            assert value(conn, "SELECT count(*) FROM awa_job_done_failed_default") > 0
            # An interrupted earlier run, or the build's first statements: the index on the parent
            # and on one branch, alone. The leader attaches a range to that branch now: the new
            # range gets the index from its branch, attached.
            definition = migration.NEW[FINALIZED][1]
            conn.execute(f"CREATE INDEX {FINALIZED} ON ONLY awa_job_done {definition}")
            conn.execute(f"CREATE INDEX completed_finalized ON ONLY awa_job_done_completed {definition}")
            conn.execute(f"ALTER INDEX {FINALIZED} ATTACH PARTITION completed_finalized")
            attached = day_partition(conn, "awa_job_done_completed", today + timedelta(days=1))
            state = index_state(conn, FINALIZED)
            assert state is not None and state[0] is False and attached in state[1], state

        manage(dbname, "migrate", "awa", "0026", "-v", "0")

        with connect_outside_django(dbname) as conn:
            assert_complete(conn, NEW)
            assert all(index_state(conn, name) is None for name in OLD)
            # The reads the indexes are for: a time filter's newest ids from index entries alone,
            # and a queue's failed jobs counted through the partial index.
            conn.execute("VACUUM ANALYZE awa_job_done")
            with conn.transaction():
                conn.execute("SET LOCAL enable_seqscan = off")
                conn.execute("SET LOCAL enable_bitmapscan = off")
                plan = explain(
                    conn,
                    "SELECT id FROM awa_job_done WHERE finalized_at >= now() - interval '1 hour' "
                    "ORDER BY id + 0 DESC LIMIT 50",
                )
                assert "Index Only Scan using" in plan and "finalized_at_id_idx" in plan, plan
                plan = explain(
                    conn,
                    "SELECT count(*) FROM (SELECT 1 FROM awa_job_done "
                    "WHERE state = 'failed' AND queue = 'q1' LIMIT 10001) AS c",
                )
                assert "Index Only Scan using" in plan and "_queue_idx" in plan, plan

        manage(dbname, "migrate", "awa", "0025", "-v", "0")
        with connect_outside_django(dbname) as conn:
            assert_complete(conn, OLD)
            assert all(index_state(conn, name) is None for name in NEW)

        manage(dbname, "migrate", "awa", "-v", "0")
        with connect_outside_django(dbname) as conn:
            assert_complete(conn, NEW)
            assert all(index_state(conn, name) is None for name in OLD)


FEED_SQL = """
INSERT INTO awa_job_done (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at,
                          finalized_at, created_at, errors, metadata, tags, run_lease, fair_key, pending)
VALUES (nextval(pg_get_serial_sequence('awa_job', 'id')), 'k', 'q1', '{}'::jsonb, 'completed', 2, 1, 25, now(),
        now(), now(), now(), '[]'::jsonb, '{}'::jsonb, '{}', 1, '', 0)
"""
BLOCKED_DDL = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = %(db)s AND wait_event_type = 'Lock' AND (query ILIKE 'ALTER INDEX%%' OR query ILIKE 'DROP INDEX%%')
"""


class Feeder(threading.Thread):
    """Inserts finished jobs into awa_job_done one at a time, each allowed to wait 5 s for its lock:
    a writer queued behind a DDL that waits for a long reader would fail."""

    def __init__(self, dbname: str) -> None:
        super().__init__(name="0026-feeder", daemon=True)
        self.dbname = dbname
        self.inserted = 0
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with connect_outside_django(self.dbname) as conn:
            conn.autocommit = True
            conn.execute("SET lock_timeout = '5s'")
            while not self.stopping.is_set():
                try:
                    conn.execute(FEED_SQL)
                    self.inserted += 1
                except psycopg.Error as error:
                    self.errors.append(error)
                    return


@pytest.mark.slow  # a migrate run in a subprocess held up by a reader: 20-40 s
@pytest.mark.db
@pytest.mark.subprocess
def test_migration_0026__a_long_reader_holds_up_the_migration_not_the_writers() -> None:
    """A console query (a transaction that has read awa_job_done and stays open) holds its
    ACCESS SHARE lock while 0026 runs. The statements whose lock would queue every insert behind
    them (the ATTACH that completes a partitioned index, the DROP INDEX) ask for it 200 ms at a
    time and retry: the inserts go on, each under a 5 s lock_timeout, while the migration waits
    for the reader; once it ends, the migration completes."""
    with upgrade_database() as dbname:
        manage(dbname, "migrate", "awa", "0025", "-v", "0")
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        with connect_outside_django(dbname) as conn:
            conn.autocommit = True
            for branch in ("awa_job_done_completed", "awa_job_done_failed"):
                day_partition(conn, branch, today - timedelta(days=1))
            conn.execute(HISTORY_SQL)
        with connect_outside_django(dbname) as reader, connect_outside_django(dbname) as watcher:
            watcher.autocommit = True
            reader.autocommit = False
            reader.execute("SELECT count(*) FROM awa_job_done")  # its transaction stays open
            assert reader.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            feeder = Feeder(dbname)
            feeder.start()
            migrate = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "migrate", "awa", "0026", "-v", "0"],
                cwd=ROOT,
                env=process_env(dbname, ROOT),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_until(
                    lambda: value(watcher, BLOCKED_DDL, {"db": dbname}) > 0 or migrate.poll() is not None,
                    timeout=120,
                    what="the migration's ALTER INDEX or DROP INDEX waiting for the reader's lock",
                )
                assert migrate.poll() is None, migrate.communicate()[0].decode()
                since = feeder.inserted
                wait_until(lambda: feeder.inserted >= since + 50 or feeder.errors, timeout=60, what="50 inserts")
                assert migrate.poll() is None, "the migration ended while the reader held its lock"
                reader.rollback()  # the console query ends
                output = migrate.communicate(timeout=600)[0].decode()
                assert migrate.returncode == 0, output
            finally:
                if migrate.poll() is None:
                    migrate.kill()
                feeder.stopping.set()
                feeder.join(30)
            assert not feeder.errors, feeder.errors
            assert_complete(watcher, NEW)
