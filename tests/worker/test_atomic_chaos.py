"""Chaos for ``@job(atomic=True)``: real workers SIGKILLed at random instants, and the handlers'
database writes still happen exactly once per completed job.

Each job adds 1 to one counter row and then works for a few milliseconds, so that kills land
between the write and the completion. Two ``awa_worker`` processes share the run; one of them is
SIGKILLed at a random instant while it runs jobs, again and again, and restarted each time. With
``count_atomic`` the counter ends equal to the number of completed jobs exactly. The control,
``count_plain`` (the same handler without ``atomic``), ends above it: the kills do land where it
matters, so the test can fail. The control needs fewer kills (3) and longer work (100 ms): its
increments commit at once, so its jobs do not queue on the counter row's lock, and run twenty at a
time; with 12 ms they would all be over before the victim's first restart.

Like test_chaos, it runs on a private server (tests/privateserver.py) of its own, so its workers,
its kills and its rescues disturb no other test, and it runs on any DATABASE_URL.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from functools import partial

import pytest

from tests.harness import wait_until
from tests.privateserver import PrivateServer, migrated_server, state_counts
from tests.worker.support import SpawnedWorker, Spawner

QUEUE = "atomic_chaos"
WORKER_ARGS = (
    "-q",
    QUEUE,
    "--heartbeat-interval",
    "0.5",
    "--heartbeat-staleness",
    "2",
    "--poll-interval",
    "0.5",
    "--shutdown-timeout",
    "5",
)


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with migrated_server("awa_atomic_chaos") as private:
        with private.connect() as conn:  # the table count_atomic and count_plain increment
            conn.execute("CREATE TABLE demo_counter (id int PRIMARY KEY, n bigint NOT NULL)")
            conn.execute("INSERT INTO demo_counter VALUES (1, 0)")
        yield private


def _counter(server: PrivateServer) -> int:
    return int(server.value("SELECT n FROM demo_counter WHERE id = 1"))


def _table(server: PrivateServer) -> str:
    """Where every job is read: the view of the hot and finished tables, once storage has one."""
    return "awa_job_all" if server.value("SELECT to_regclass('awa_job_all') IS NOT NULL") else "awa_job"


def _ended(server: PrivateServer) -> dict[str, int]:
    """Jobs by state, hot and finished alike."""
    if _table(server) == "awa_job":
        return state_counts(server)
    return {state: int(n) for state, n in server.rows("SELECT state, count(*) FROM awa_job_all GROUP BY state")}


def _retried(server: PrivateServer) -> int:
    if _table(server) == "awa_job":
        return int(server.value("SELECT count(*) FROM awa_job WHERE attempt > 1"))
    return int(server.value("SELECT count(*) FROM awa_job_all WHERE attempt > 1"))


def _completed(server: PrivateServer) -> int:
    return _ended(server).get("completed", 0)


def _running_here(server: PrivateServer, worker: SpawnedWorker) -> bool:
    """Whether the worker's process runs jobs now (attempted_by is "host:pid")."""
    pattern = f"%:{worker.process.pid}"
    return bool(
        server.rows("SELECT 1 FROM awa_job WHERE state = 'running' AND attempted_by LIKE %s LIMIT 1", [pattern])
    )


# Jobs added whenever fewer than this many wait, so that each restarted victim finds work.
TOP_UP = 300


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("kind", "jobs", "kills", "ms"),
    [("count_atomic", 3000, 20, 12.0), ("count_plain", 3000, 3, 100.0)],
    ids=["atomic", "plain-control"],
)
def test_atomic_chaos__worker_killed_at_random__counter_equals_completed_jobs(
    server: PrivateServer, spawn_private: Spawner, kind: str, jobs: int, kills: int, ms: float
) -> None:
    rng = random.Random(45)
    server.enqueue_many([{"kind": kind, "queue": QUEUE, "args": {"ms": ms}} for _ in range(jobs)])
    steady = spawn_private(*WORKER_ARGS, name="steady")
    victim = spawn_private(*WORKER_ARGS, name="victim-0")
    killed = 0
    while killed < kills:
        # The steady worker may drain the backlog while a victim starts (slowly, on a loaded
        # machine): a full run once left victim 19 nothing to run. Top it up, so every victim
        # has work to be killed in; the jobs enqueued are what must all complete.
        waiting = int(server.value("SELECT count(*) FROM awa_job WHERE state = 'available'"))
        if waiting < TOP_UP:
            server.enqueue_many([{"kind": kind, "queue": QUEUE, "args": {"ms": ms}} for _ in range(TOP_UP)])
            jobs += TOP_UP
        wait_until(partial(_running_here, server, victim), timeout=120, what=f"victim {killed} to run jobs")
        time.sleep(rng.uniform(0.0, 0.6))  # a random instant of its run
        victim.signal(signal.SIGKILL)
        victim.wait_exit()
        killed += 1
        victim = spawn_private(*WORKER_ARGS, name=f"victim-{killed}")

    wait_until(lambda: _completed(server) == jobs, timeout=240, what=f"{jobs} completed jobs")
    for survivor in (steady, victim):
        survivor.assert_alive()
        survivor.signal(signal.SIGTERM)
    for survivor in (steady, victim):
        assert survivor.wait_exit() == 0, survivor.log[-4000:]

    assert _ended(server) == {"completed": jobs}  # nothing lost, nothing left running
    assert _retried(server) > 0, "no job needed a second attempt: no kill interrupted one"
    if kind == "count_atomic":
        assert _counter(server) == jobs  # each completed job's increment committed once, no other
    else:
        assert _counter(server) > jobs  # the control: killed attempts' increments stayed
