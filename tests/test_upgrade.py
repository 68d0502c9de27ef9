"""Upgrade in place (issue 43): migration 0023 runs on a table with history while a worker of the
previous release drains, and no job is lost, run twice or stalled.

The database is the test's own, on the shared server, built by the current code up to 0022 (the
previous release's schema) and filled by the server (``INSERT ... SELECT generate_series``) with
finished history and a backlog of ``noop`` jobs. A worker of the previous release (a git worktree
of ``PREVIOUS_RELEASE``, run with this environment's Python) drains the backlog while a feeder
keeps adding jobs, so that it claims and completes throughout; ``manage.py migrate awa`` (0023 and 0024) runs
meanwhile with the current code. The old worker goes on until it has finished jobs written after
the migration (the trigger moves those to ``awa_job_done``), is stopped with SIGTERM, and a worker
of the current release drains the rest.

``AWA_UPGRADE_HISTORY`` sets the completed history's size (300,000 by default; a tenth as many
failed jobs besides): ``AWA_UPGRADE_HISTORY=5000000`` runs the issue's 5 M-row case. The output
(``-s``) gives the migration's duration and the longest gap between two claims while it ran;
nothing here asserts a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql

from testproject import embedded
from tests.conftest import connect_outside_django
from tests.harness import ROOT, spawn_worker, terminate, wait_until

PREVIOUS_RELEASE = "e11ba2c"  # the last commit before migration 0023: the previous release's code
HISTORY = int(os.environ.get("AWA_UPGRADE_HISTORY", "300000"))
BACKLOG = 30_000  # noop jobs waiting when the old worker starts
FEED_BATCH = 50  # the feeder's jobs per insert, one insert every FEED_PAUSE seconds
FEED_PAUSE = 0.05
AFTER_MIGRATION = 1_000  # jobs the old worker must finish after the migration before it stops
CHUNK = 1_000_000  # history rows per INSERT
DRAIN_DEADLINE = 900.0  # seconds: a generous bound on the drain after the migration, not a speed

WORKER_ARGS = ("-q", "default", "--poll-interval", "0.5", "--heartbeat-interval", "1", "--shutdown-timeout", "30")

# Finished history as the previous release kept it, in awa_job: completed and failed jobs of the last
# twelve hours (inside every retention, so none is pruned while the test runs), with args, tags and
# errors for the finished-only indexes 0023 drops.
HISTORY_SQL = """
INSERT INTO awa_job (
    kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, attempted_by,
    finalized_at, created_at, errors, metadata, tags, run_lease, fair_key
)
SELECT 'history.' || (g %% 20), 'default', jsonb_build_object('user_id', g %% 100000, 'n', g), %(state)s::varchar,
       2, 1, 25, t.at, t.at, 'history-host:1', t.at + interval '1 second', t.at,
       CASE WHEN %(state)s = 'failed'
            THEN jsonb_build_array(jsonb_build_object('error', 'KeyError: ' || (g %% 20), 'attempt', 1))
            ELSE '[]'::jsonb END,
       '{}'::jsonb, ARRAY['tenant-' || (g %% 50)], 1, ''
FROM generate_series(1, %(rows)s::bigint) AS g,
LATERAL (SELECT now() - interval '12 hours' * (g::float8 / %(rows)s) AS at) AS t
"""

# A noop job as the previous release's insert_job writes it.
NOOP_SQL = """
INSERT INTO awa_job (
    kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, errors, metadata, tags,
    run_lease, fair_key
)
SELECT 'noop', 'default', '{}'::jsonb, 'available', 2, 0, 25, now(), now(), '[]'::jsonb, '{}'::jsonb, '{}', 0, ''
FROM generate_series(1, %(n)s::int)
RETURNING id
"""


@contextmanager
def upgrade_database() -> Iterator[str]:
    """A database of the test's own on the shared server (synchronous_commit off, as the suite's),
    dropped at the end whoever is still connected."""
    name = f"{os.environ.get('AWA_TEST_DB', 'test_awa')}_upgrade_{uuid.uuid4().hex[:8]}"
    with connect_outside_django("postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit TO off").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with connect_outside_django("postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def previous_release(tmp_path: Path) -> Iterator[Path]:
    """A detached git worktree of PREVIOUS_RELEASE, removed at the end."""
    path = tmp_path / "previous"
    git = ("git", "-C", str(ROOT))
    subprocess.run([*git, "worktree", "add", "--detach", str(path), PREVIOUS_RELEASE], check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(path)], check=True, capture_output=True)


def process_env(dbname: str, code: Path) -> dict[str, str]:
    """A manage.py process on ``dbname`` of the shared server, importing the code in ``code`` first
    (PYTHONPATH comes before the editable install's finder). AWA_PGDATA keeps a worktree's embedded
    server the shared one, not a new one in the worktree."""
    env = {k: v for k, v in os.environ.items() if k != "AWA_TEST_DB"}
    env.update(AWA_DB_NAME=dbname, AWA_PGDATA=str(embedded.DATA_DIR), PYTHONPATH=str(code), PYTHONUNBUFFERED="1")
    return env


def manage(dbname: str, *args: str) -> float:
    """Run the current code's ``manage.py ARGS`` on ``dbname`` (it must exit 0); its duration in seconds."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=process_env(dbname, ROOT),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)}: {result.stdout}{result.stderr}"
    return time.monotonic() - started


class Feeder(threading.Thread):
    """Adds FEED_BATCH noop jobs every FEED_PAUSE seconds until stopped, on a connection of its own;
    the ids it added are in ``ids``, a failure in ``error``."""

    def __init__(self, dbname: str) -> None:
        super().__init__(name="upgrade-feeder", daemon=True)
        self.dbname = dbname
        self.ids: list[int] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            with connect_outside_django(self.dbname) as conn:
                while not self.stopping.wait(FEED_PAUSE):
                    self.ids.extend(row[0] for row in conn.execute(NOOP_SQL, {"n": FEED_BATCH}).fetchall())
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> list[int]:
        self.stopping.set()
        self.join(60)
        assert not self.is_alive(), "the feeder did not stop"
        if self.error is not None:
            raise self.error
        return self.ids


def value(conn: psycopg.Connection[Any], query: LiteralString, params: dict[str, Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fill(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
    """Write the history and the backlog; return the history's size and the backlog's ids."""
    for state, rows in (("completed", HISTORY), ("failed", HISTORY // 10)):
        for first in range(0, rows, CHUNK):
            conn.execute(HISTORY_SQL, {"state": state, "rows": min(CHUNK, rows - first)})
    history = int(value(conn, "SELECT count(*) FROM awa_job"))
    backlog = [row[0] for row in conn.execute(NOOP_SQL, {"n": BACKLOG}).fetchall()]
    conn.execute("ANALYZE awa_job")
    return history, backlog


def start_previous_worker(previous: Path, dbname: str, log: Path) -> subprocess.Popen[bytes]:
    """``manage.py awa_worker`` of the previous release, after checking that its process imports the
    worktree's packages, not the editable install's."""
    env = process_env(dbname, previous)
    probe = "import awa_django, testproject; print(awa_django.__file__, testproject.__file__)"
    imported = subprocess.run(
        [sys.executable, "-c", probe], cwd=previous, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert imported == [str(previous / package / "__init__.py") for package in ("awa_django", "testproject")]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "awa_worker", *WORKER_ARGS],
            cwd=previous,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(process: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, and a clean exit: the in-flight jobs finished, nothing left claimed."""
    terminate(process)
    assert process.wait(60) == 0, log.read_text()[-4000:]


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " ERROR " in line or line.startswith("Traceback")]


# The polls read partial indexes, not the history (a scan of millions of rows every poll).
UNFINISHED = "SELECT count(*) FROM awa_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'waiting')"
FINISHED_SINCE = (
    "SELECT count(*) FROM awa_job_all WHERE state = 'completed' AND finalized_at > %(since)s "
    "AND attempted_by LIKE %(worker)s"
)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.db  # a database of its own on the shared server, outside pytest-django
def test_migration_0023__under_a_draining_old_worker__loses_and_stalls_no_job(tmp_path: Path) -> None:
    old_log, new_log = tmp_path / "old-worker.log", tmp_path / "new-worker.log"
    with upgrade_database() as dbname, previous_release(tmp_path) as previous:
        manage(dbname, "migrate", "awa", "0022", "-v", "0")
        with connect_outside_django(dbname) as conn:
            filling = time.monotonic()
            history, enqueued = fill(conn)
            fill_seconds = time.monotonic() - filling
            old = start_previous_worker(previous, dbname, old_log)
            new: subprocess.Popen[bytes] | None = None
            feeder = Feeder(dbname)
            try:
                wait_until(
                    lambda: value(conn, UNFINISHED) <= BACKLOG - 1_000,
                    timeout=120,
                    interval=0.2,
                    what="the old worker to start draining",
                )
                feeder.start()  # from here on, the old worker has work throughout
                migration_start: datetime = value(conn, "SELECT clock_timestamp()")
                migration_seconds = manage(dbname, "migrate", "awa", "-v", "0")  # 0023, then 0024
                migration_end: datetime = value(conn, "SELECT clock_timestamp()")
                assert old.poll() is None, f"the old worker exited during the migration:\n{old_log.read_text()[-4000:]}"

                # The old worker goes on finishing jobs after the migration, with its own statements.
                old_worker = f"%:{old.pid}"
                wait_until(
                    lambda: (
                        value(conn, FINISHED_SINCE, {"since": migration_end, "worker": old_worker}) >= AFTER_MIGRATION
                    ),
                    timeout=DRAIN_DEADLINE,
                    interval=0.2,
                    what=f"the old worker to finish {AFTER_MIGRATION} jobs after the migration",
                )
                enqueued += feeder.stop()
                stop(old, old_log)

                new = spawn_worker(*WORKER_ARGS, env=process_env(dbname, ROOT), log=new_log)
                wait_until(
                    lambda: value(conn, UNFINISHED) == 0,
                    timeout=DRAIN_DEADLINE,
                    interval=0.2,
                    what=f"every job to be finished within {DRAIN_DEADLINE}s of the migration's end (a stall)",
                )
                drain_end: datetime = value(conn, "SELECT clock_timestamp()")
                stop(new, new_log)
            finally:
                feeder.stopping.set()
                for process in (old, new):
                    if process is not None and process.poll() is None:
                        process.kill()
                        process.wait(30)

            # Every job enqueued is there once, completed by its first attempt: none lost, none run twice.
            rows = conn.execute(
                "SELECT id, state, attempt, attempted_by, finalized_at, tableoid = 'awa_job'::regclass AS hot "
                "FROM (SELECT tableoid, * FROM awa_job UNION ALL SELECT tableoid, * FROM awa_job_done) AS j "
                "WHERE kind = 'noop'"
            ).fetchall()
            by_id: dict[int, list[tuple[Any, ...]]] = {}
            for row in rows:
                by_id.setdefault(row[0], []).append(row)
            assert sorted(by_id) == sorted(enqueued), "jobs lost, or jobs no one enqueued"
            twice = {job_id: found for job_id, found in by_id.items() if len(found) != 1}
            assert twice == {}, f"jobs in both tables or twice: {list(twice.items())[:5]}"
            unfinished = [row for row in rows if row[1] != "completed" or row[2] != 1]
            assert unfinished == [], f"{len(unfinished)} jobs not completed by one attempt, e.g. {unfinished[:5]}"
            assert value(conn, "SELECT count(DISTINCT id) FROM awa_job_all WHERE kind = 'noop'") == len(enqueued)

            # Where they went: finished before the migration, still hot (the view shows them);
            # finished after it, by the old worker too, moved to awa_job_done by the trigger.
            hot_late = [row for row in rows if row[5] and row[4] >= migration_end]
            assert hot_late == [], f"finished after the migration but left hot: {hot_late[:5]}"
            moved_early = [row for row in rows if not row[5] and row[4] < migration_start]
            assert moved_early == [], f"finished before the migration but moved: {moved_early[:5]}"
            old_moved = sum(1 for row in rows if not row[5] and row[3].endswith(f":{old.pid}"))
            assert old_moved >= AFTER_MIGRATION
            # The history stays where it was, untouched, until retention.
            assert value(conn, "SELECT count(*) FROM awa_job WHERE kind LIKE 'history.%'") == history

            gap_during, gap_overall = conn.execute(
                "SELECT max(gap) FILTER (WHERE at BETWEEN %(start)s AND %(end)s), max(gap) "
                "FROM (SELECT attempted_at AS at, attempted_at - lag(attempted_at) OVER (ORDER BY attempted_at) AS gap "
                "      FROM awa_job_all WHERE kind = 'noop') AS claims",
                {"start": migration_start, "end": migration_end},
            ).fetchone() or (None, None)
            print(
                f"\nupgrade: history={history} (written in {fill_seconds:.0f}s) jobs={len(enqueued)} "
                f"migration={migration_seconds:.1f}s (manage.py, start-up included) "
                f"longest claim gap during it={gap_during} overall={gap_overall} (the change of worker included) "
                f"old worker's jobs moved by the trigger={old_moved} "
                f"drain after the migration={(drain_end - migration_end).total_seconds():.1f}s"
            )

        # Last, so that a failure here says the jobs themselves came through.
        assert error_lines(old_log) == [], "the previous release's worker logged errors"
        assert error_lines(new_log) == [], "the current release's worker logged errors"
