"""Chaos for durable jobs: real workers SIGKILLed at random instants, and each step's side effect
still happens once, or once more for each kill that landed inside that very step.

The handler is testproject/demo/durable_jobs.py's ``demo_durable_effects``: steps ``s1``…``s4``,
each of which first writes a row of ``demo_step_effect`` on a connection of its own (autocommit:
outside the job's transaction and the step's record), then works a few milliseconds. A step's
result is its row's id, so the job's result names, for each step, the execution whose record
was kept. Two ``awa_worker`` processes share a run; one of them is SIGKILLed at a random instant
while it runs steps, again and again, and restarted each time (as in tests/worker/
test_atomic_chaos.py). Afterwards, from the database: every job completed, and every execution
of a step other than the kept one is explained by a kill. It ran in a process that was killed,
and it was the last step its attempt started: the kill landed inside it, before its record was
written. That rules out a step that completed and ran again.

The control runs the same effects without steps (``durable=False``): killed attempts' completed
effects run again (the kills do land where steps matter, so the test can fail). A third run sleeps
durably between ``s2`` and ``s3``: jobs parked while the worker that ran their first half was
killed resume elsewhere, and their first steps do not run again.

A last test is deterministic: a worker is killed while a handler is held inside its second step
(by an advisory lock the test holds); another worker rescues the job, and only that step runs again.

Each run prints its kills and the doubled steps with the kill that explains each (pytest -s shows
them; a failure shows them too). Like test_atomic_chaos, it runs on a private server of its own
(tests/privateserver.py), one for the module.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from testproject.demo.durable_jobs import EFFECT_COLUMNS
from tests.harness import wait_until
from tests.privateserver import PrivateServer, migrated_server
from tests.worker.support import SpawnedWorker, Spawner

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

KIND = "demo_durable_effects"
WORKER_ARGS = (
    "--heartbeat-interval",
    "0.5",
    "--heartbeat-staleness",
    "3",
    "--poll-interval",
    "0.5",
    "--shutdown-timeout",
    "5",
)
STEPS = 4
# Jobs added whenever fewer than this many are available, so that each restarted victim finds work.
TOP_UP = 200


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    with migrated_server("awa_durable_chaos") as private:
        with private.connect() as conn:
            conn.execute(f"CREATE TABLE demo_step_effect ({EFFECT_COLUMNS})")
        yield private


@pytest.fixture
def spawn(server: PrivateServer, tmp_path: Path) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path, env=server.env())
    try:
        yield spawner
    finally:
        spawner.reap()


@dataclass(frozen=True)
class Kill:
    pid: int
    at: datetime  # the database's clock once the process had exited
    effects: int  # the steps it had started


@dataclass(frozen=True)
class Execution:
    """One run of a step's function: a row of demo_step_effect."""

    id: int
    job_id: int
    step: str
    attempt: int
    run_lease: int
    pid: int
    at: datetime

    @property
    def brief(self) -> str:
        return (
            f"job {self.job_id} {self.step}: run {self.id} at {self.at:%H:%M:%S.%f} in pid {self.pid} "
            f"(attempt {self.attempt}, lease {self.run_lease})"
        )


def _executions(server: PrivateServer, queue: str) -> list[Execution]:
    rows = server.rows(
        "SELECT e.id, e.job_id, e.step, e.attempt, e.run_lease, e.pid, e.at FROM demo_step_effect e "
        "JOIN awa_job_all j ON j.id = e.job_id WHERE j.queue = %s ORDER BY e.id",
        [queue],
    )
    return [Execution(*row) for row in rows]


def _kept(server: PrivateServer, queue: str) -> dict[int, dict[str, int]]:
    """Each completed job's result: the id of the execution whose result was stored, by step."""
    rows = server.rows("SELECT id, result FROM awa_job_all WHERE queue = %s AND state = 'completed'", [queue])
    return {job_id: result["effects"] for job_id, result in rows}


def _states(server: PrivateServer, queue: str) -> dict[str, int]:
    rows = server.rows("SELECT state, count(*) FROM awa_job_all WHERE queue = %s GROUP BY state", [queue])
    return {state: int(n) for state, n in rows}


def _stepping(server: PrivateServer, worker: SpawnedWorker) -> bool:
    """Whether the worker's process has started a step yet."""
    return bool(server.rows("SELECT 1 FROM demo_step_effect WHERE pid = %s LIMIT 1", [worker.process.pid]))


def _started(server: PrivateServer, worker: SpawnedWorker) -> bool:
    """Whether the worker has written its first snapshot (past Django's start, its signal handlers set)."""
    return bool(server.rows("SELECT 1 FROM awa_worker_instance WHERE pid = %s", [worker.process.pid]))


def _enqueue(server: PrivateServer, queue: str, n: int, args: dict[str, Any]) -> int:
    server.enqueue_many([{"kind": KIND, "queue": queue, "args": args} for _ in range(n)])
    return n


def _chaos(
    server: PrivateServer, spawn: Spawner, queue: str, args: dict[str, Any], *, jobs: int, kills: int, seed: int
) -> list[Kill]:
    """Run ``jobs`` jobs (and more, topped up) on two workers, one SIGKILLed ``kills`` times at
    random instants while it runs steps, and restarted; until every job completed. The kills."""
    rng = random.Random(seed)
    worker_args = ("-q", queue, *WORKER_ARGS)
    jobs = _enqueue(server, queue, jobs, args)
    steady = spawn(*worker_args, name="steady")
    victim = spawn(*worker_args, name="victim-0")
    done: list[Kill] = []

    def victim_stepping() -> bool:
        # The steady worker may drain the backlog while a victim starts (slowly, on a loaded
        # machine): top it up meanwhile, so that every victim has steps to be killed in.
        nonlocal jobs
        if _stepping(server, victim):
            return True
        if _states(server, queue).get("available", 0) < TOP_UP:
            jobs += _enqueue(server, queue, TOP_UP, args)
        return False

    while len(done) < kills:
        wait_until(victim_stepping, timeout=120, what=f"victim {len(done)} to run steps")
        time.sleep(rng.uniform(0.0, 0.5))  # a random instant of its run (no condition to wait for)
        victim.signal(signal.SIGKILL)
        victim.wait_exit()
        pid = victim.process.pid
        at, effects = server.rows("SELECT clock_timestamp(), count(*) FROM demo_step_effect WHERE pid = %s", [pid])[0]
        done.append(Kill(pid, at, int(effects)))
        victim = spawn(*worker_args, name=f"victim-{len(done)}")

    wait_until(lambda: _states(server, queue).get("completed", 0) == jobs, timeout=240, what=f"{jobs} completed jobs")
    for survivor in (steady, victim):
        survivor.assert_alive()
        # Past its start (the last victim may still be starting): a SIGTERM before its signal
        # handlers are installed would end it at once, without its drain.
        wait_until(partial(_started, server, survivor), timeout=60, what=f"{survivor.log_path.name}'s first snapshot")
        survivor.signal(signal.SIGTERM)
    for survivor in (steady, victim):
        assert survivor.wait_exit() == 0, survivor.log[-4000:]
    assert _states(server, queue) == {"completed": jobs}  # nothing lost, nothing left running or parked
    return done


@dataclass
class Verdict:
    """Every execution of a step other than the kept one (the job's result names it), sorted."""

    doubled: list[tuple[Execution, Kill]]  # the last step its attempt started, in a killed process
    unexplained: list[Execution]  # the last step of its attempt, in a process nobody killed
    completed_again: list[Execution]  # its attempt went on to another step: it had completed

    def lines(self, kills: list[Kill], kept: dict[int, dict[str, int]], limit: int = 12) -> str:
        out = [f"{len(kills)} kills:"]
        out += [f"  pid {k.pid} killed at {k.at:%H:%M:%S.%f} after {k.effects} step runs" for k in kills]
        out.append(f"{len(self.doubled)} steps ran twice, each interrupted by a kill:")
        for run, kill in self.doubled[:limit]:
            kept_run = kept[run.job_id][run.step]
            out.append(f"  {run.brief}, killed at {kill.at:%H:%M:%S.%f} inside it; run {kept_run} kept")
        out.append(f"{len(self.unexplained)} unexplained runs, {len(self.completed_again)} runs of a completed step:")
        out += [f"  unexplained: {run.brief}" for run in self.unexplained[:limit]]
        out += [f"  completed, run again: {run.brief}" for run in self.completed_again[:limit]]
        return "\n".join(out)


def _judge(executions: list[Execution], kept: dict[int, dict[str, int]], kills: list[Kill]) -> Verdict:
    killed = {kill.pid: kill for kill in kills}
    last: dict[tuple[int, int], int] = {}  # (job, run_lease) → the id of the last step it started
    for run in executions:
        last[(run.job_id, run.run_lease)] = max(run.id, last.get((run.job_id, run.run_lease), 0))
    verdict = Verdict([], [], [])
    for run in executions:
        if run.id == kept[run.job_id][run.step]:
            continue
        if last[(run.job_id, run.run_lease)] != run.id:
            verdict.completed_again.append(run)
        elif run.pid in killed:
            verdict.doubled.append((run, killed[run.pid]))
        else:
            verdict.unexplained.append(run)
    return verdict


def _assert_kept(executions: list[Execution], kept: dict[int, dict[str, int]]) -> None:
    """Every completed job kept one execution of each of its steps, one of its own."""
    by_id = {run.id: run for run in executions}
    for job_id, effects in kept.items():
        assert sorted(effects) == [f"s{i}" for i in range(1, STEPS + 1)], (job_id, effects)
        for step, run_id in effects.items():
            run = by_id[run_id]
            assert (run.job_id, run.step) == (job_id, step), (job_id, step, run)


def test_chaos__workers_killed_at_random__each_step_runs_once_or_again_only_when_killed_inside_it(
    server: PrivateServer, spawn: Spawner
) -> None:
    queue = "durable_chaos"
    kills = _chaos(server, spawn, queue, {"steps": STEPS, "ms": 25}, jobs=600, kills=4, seed=46)
    executions, kept = _executions(server, queue), _kept(server, queue)
    verdict = _judge(executions, kept, kills)
    report = verdict.lines(kills, kept)
    print(report)

    _assert_kept(executions, kept)
    assert verdict.completed_again == [], report  # no step that completed ran again
    assert verdict.unexplained == [], report  # every second run follows a kill inside the first
    # The kills did land inside steps (else this test would prove nothing).
    assert verdict.doubled, report
    # And once per kill: a process runs a job's step once at most, so no kill explains two runs.
    assert max(Counter((run.job_id, run.step, run.pid) for run, _ in verdict.doubled).values()) == 1


def test_chaos__control_without_steps__killed_attempts_run_completed_effects_again(
    server: PrivateServer, spawn: Spawner
) -> None:
    """The same effects, called directly rather than as steps: what the steps prevent does happen."""
    queue = "durable_chaos_control"
    kills = _chaos(server, spawn, queue, {"steps": STEPS, "ms": 25, "durable": False}, jobs=600, kills=2, seed=47)
    executions, kept = _executions(server, queue), _kept(server, queue)
    verdict = _judge(executions, kept, kills)
    report = verdict.lines(kills, kept)
    print(report)

    _assert_kept(executions, kept)
    assert verdict.completed_again, report  # effects of completed parts, run again after a kill
    assert verdict.unexplained == [], report


def test_chaos__sleeping_jobs__killed_or_resumed_after_a_kill__keep_their_steps(
    server: PrivateServer, spawn: Spawner
) -> None:
    """A durable sleep of a second between s2 and s3: the jobs park, the worker that ran their first
    half is killed meanwhile, and they resume on another worker with s1 and s2 not run again."""
    queue = "durable_chaos_sleep"
    args = {"steps": STEPS, "ms": 25, "sleep": 1.0}
    kills = _chaos(server, spawn, queue, args, jobs=600, kills=3, seed=48)
    executions, kept = _executions(server, queue), _kept(server, queue)
    verdict = _judge(executions, kept, kills)
    by_id = {run.id: run for run in executions}
    killed = {kill.pid: kill for kill in kills}
    slept = dict(
        server.rows(
            "SELECT s.job_id, s.started_at FROM awa_job_step s JOIN awa_job_all j ON j.id = s.job_id "
            "WHERE j.queue = %s AND s.kind = 'sleep'",
            [queue],
        )
    )
    assert slept.keys() == kept.keys()  # every job slept
    # Jobs that slept through the death of the worker that ran their first half: s2's kept run
    # was in a killed process, the job parked before the kill, and s3's kept run began after it.
    slept_through = [
        job_id
        for job_id, effects in kept.items()
        if (kill := killed.get(by_id[effects["s2"]].pid)) is not None
        and slept[job_id] < kill.at < by_id[effects["s3"]].at
    ]
    report = verdict.lines(kills, kept) + f"\n{len(slept_through)} jobs slept through a kill of their first worker"
    print(report)

    _assert_kept(executions, kept)
    assert verdict.completed_again == [], report
    assert verdict.unexplained == [], report
    assert slept_through, report


def _lock_waiters(server: PrivateServer, key: int) -> int:
    """Sessions waiting for the advisory lock ``key`` (a held step, a killed worker's leftover)."""
    return int(
        server.value(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            [key],
        )
    )


def test_rescue__worker_killed_inside_the_second_step__only_that_step_runs_again(
    server: PrivateServer, spawn: Spawner
) -> None:
    queue = "durable_rescue"
    worker_args = ("-q", queue, *WORKER_ARGS)
    _enqueue(server, queue, 1, {"steps": 3, "hold": 2})
    job_id = int(server.value("SELECT id FROM awa_job WHERE queue = %s", [queue]))

    def runs(step: str) -> list[tuple[int, int, int]]:
        return [
            (run_id, attempt, pid)
            for run_id, attempt, pid in server.rows(
                "SELECT id, attempt, pid FROM demo_step_effect WHERE job_id = %s AND step = %s ORDER BY id",
                [job_id, step],
            )
        ]

    with server.connect() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [job_id])  # s2 waits for it
        doomed = spawn(*worker_args, name="doomed")
        wait_until(lambda: _lock_waiters(server, job_id) == 1, timeout=60, what="the first attempt held inside s2")
        assert [pid for _, _, pid in runs("s2")] == [doomed.process.pid]
        doomed.signal(signal.SIGKILL)
        doomed.wait_exit()
        rescuer = spawn(*worker_args, name="rescuer")
        # The rescue (once the dead worker's heartbeat is stale) runs s2 again, held again.
        wait_until(lambda: len(runs("s2")) == 2, timeout=60, what="the rescued attempt inside s2")
        holder.execute("SELECT pg_advisory_unlock(%s)", [job_id])
    wait_until(lambda: _states(server, queue) == {"completed": 1}, timeout=60, what="the job completed")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait_exit() == 0, rescuer.log[-4000:]

    (s1,), s2, (s3,) = runs("s1"), runs("s2"), runs("s3")
    assert [(attempt, pid) for _, attempt, pid in s2] == [(1, doomed.process.pid), (2, rescuer.process.pid)]
    assert s1[1:] == (1, doomed.process.pid)  # ran once, before the kill; replayed by the rescue
    assert s3[1:] == (2, rescuer.process.pid)
    result, attempt, errors = server.rows("SELECT result, attempt, errors FROM awa_job_all WHERE id = %s", [job_id])[0]
    assert attempt == 2 and "rescued" in errors[0]["error"], (attempt, errors)
    assert result["effects"] == {"s1": s1[0], "s2": s2[1][0], "s3": s3[0]}  # the kept runs: s2's second
    records = dict(server.rows("SELECT name, attempt FROM awa_job_step WHERE job_id = %s", [job_id]))
    assert records == {"s1": 1, "s2": 2, "s3": 2}
