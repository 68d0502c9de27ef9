"""Periodic jobs end to end: real ``awa_worker`` subprocesses, their maintenance leader firing
schedules, a forced leader change, workers that were down, pause/resume and run now."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from awa_django.models import Job, Schedule, WorkerInstance
from awa_django.services.schedules import pause_schedules, resume_schedules, run_schedules_now, save_schedule
from tests.harness import ROOT, database_now, wait_until, worker_env
from tests.worker.support import Spawner

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_ARGS = ("-q", "default", "--heartbeat-interval", "0.5", "--heartbeat-staleness", "3")
SECOND = timedelta(seconds=1)


@pytest.fixture
def spawn(tmp_path: object, transactional_db: None) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path)  # type: ignore[arg-type]
    try:
        yield spawner
    finally:
        spawner.reap()


def fired(name: str) -> list[Job]:
    """The jobs the schedule's slots fired (run-now jobs excluded), by slot."""
    jobs = [j for j in Job.objects.filter(metadata__schedule=name) if not j.metadata.get("run_now")]
    return sorted(jobs, key=lambda j: j.metadata["fire_at"])


def slot(job: Job) -> datetime:
    return datetime.fromisoformat(job.metadata["fire_at"])


def per_second(name: str, **kw: object) -> Schedule:
    return save_schedule(Schedule(name=name, kind="noop", cron="* * * * * *", **kw))


def wait_for_fires(name: str, count: int, timeout: float = 30.0) -> list[Job]:
    found: list[Job] = wait_until(
        lambda: (jobs := fired(name)) and len(jobs) >= count and jobs, timeout, 0.1, f"{count} fires of {name}"
    )
    return found


def test_per_second_schedule__fires_each_second_within_a_second(spawn: Spawner) -> None:
    per_second("tick")
    worker = spawn(*WORKER_ARGS)
    wait_for_fires("tick", 1)
    start = database_now()
    jobs = wait_until(
        lambda: (
            [j for j in fired("tick") if slot(j) > start][:6]
            if len([j for j in fired("tick") if slot(j) > start]) >= 6
            else None
        ),
        30,
        0.1,
        "six fires after the first",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-3000:]
    slots = [slot(j) for j in jobs]
    assert [b - a for a, b in itertools.pairwise(slots)] == [SECOND] * 5, slots  # no slot missed
    lags = [j.created_at - slot(j) for j in jobs]
    assert all(timedelta(0) <= lag < SECOND for lag in lags), lags
    assert all(Job.objects.get(pk=j.pk).state in ("available", "running", "completed") for j in jobs)


def test_two_workers__each_slot_fires_exactly_once_through_a_forced_leader_change(spawn: Spawner) -> None:
    schedule = per_second("tick", missed="catch_up")
    workers = [spawn(*WORKER_ARGS, name="a"), spawn(*WORKER_ARGS, name="b")]
    wait_for_fires("tick", 3)
    leader_pid = wait_until(
        lambda: WorkerInstance.objects.filter(flags__leader=True).values_list("pid", flat=True).first(),
        30,
        0.1,
        "a worker reporting itself the leader",
    )
    (leader,) = [w for w in workers if w.process.pid == leader_pid]
    (survivor,) = [w for w in workers if w is not leader]
    leader.process.kill()  # no goodbye: Postgres drops its advisory lock when its session dies
    leader.wait_exit()
    killed_at = database_now()
    wait_until(
        lambda: sum(1 for j in fired("tick") if slot(j) > killed_at + 3 * SECOND) >= 2,
        30,
        0.1,
        "the survivor firing after the leader was killed",
    )
    survivor.assert_alive()
    survivor.signal(signal.SIGTERM)
    assert survivor.wait_exit() == 0, survivor.log[-3000:]
    slots = [slot(j) for j in fired("tick")]
    counts = Counter(slots)
    assert max(counts.values()) == 1, [s for s, n in counts.items() if n > 1]
    # catch_up: the slots missed during the failover were fired late, so none is missing.
    assert slots == [slots[0] + i * SECOND for i in range(len(slots))]
    assert slots[0] <= killed_at <= slots[-1]
    assert Schedule.objects.get(pk=schedule.pk).last_fire_at == slots[-1]


def first_round(name: str) -> list[Job]:
    """The jobs inserted by the schedule's first fire (one statement: one created_at)."""
    jobs = fired(name)
    first = min(j.created_at for j in jobs)
    return [j for j in jobs if j.created_at == first]


def test_missed_slots_after_workers_were_down__coalesce_fires_one_catch_up_fires_each(spawn: Spawner) -> None:
    down_since = database_now().replace(microsecond=0) - 20 * SECOND  # no worker ran for the last 20 s
    cases: dict[str, dict[str, Any]] = {
        "coalesced": {"missed": "coalesce"},
        "caught_up": {"missed": "catch_up"},
        "bounded": {"missed": "catch_up", "catch_up_limit": 5},
    }
    for name, kw in cases.items():
        schedule = per_second(name, **kw)
        Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=down_since, last_fire_at=down_since - SECOND)
    worker = spawn(*WORKER_ARGS)
    for name in ("coalesced", "caught_up", "bounded"):
        wait_for_fires(name, 1)
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-3000:]

    (coalesced,) = first_round("coalesced")
    assert slot(coalesced) >= down_since + 20 * SECOND  # only the latest missed slot
    assert not [j for j in fired("coalesced") if slot(j) < slot(coalesced)]

    caught_up = [slot(j) for j in first_round("caught_up")]
    assert caught_up[0] == down_since and len(caught_up) >= 21
    assert caught_up == [down_since + i * SECOND for i in range(len(caught_up))]

    bounded = [slot(j) for j in first_round("bounded")]
    assert len(bounded) == 5 and bounded[0] > down_since
    assert bounded == [bounded[0] + i * SECOND for i in range(5)]
    assert "schedule missed slots that were not fired schedule=bounded" in worker.log


def test_pause_resume_and_run_now(spawn: Spawner) -> None:
    schedule = per_second("tick")
    worker = spawn(*WORKER_ARGS)
    wait_for_fires("tick", 2)
    assert pause_schedules(["tick"]) == 1
    paused_at = database_now()
    before = len(fired("tick"))
    paused = Schedule.objects.get(pk=schedule.pk)

    (now_job,) = run_schedules_now(["tick"])
    wait_until(lambda: Job.objects.get(pk=now_job.pk).state == "completed", 30, 0.1, "the run-now job to run")
    assert now_job.metadata["run_now"] is True and now_job.metadata["schedule"] == "tick"
    after_run_now = Schedule.objects.get(pk=schedule.pk)
    assert (after_run_now.next_fire_at, after_run_now.last_fire_at) == (paused.next_fire_at, paused.last_fire_at)
    # Three slots pass while paused (measured on the database clock): none fires.
    wait_until(lambda: database_now() > paused_at + 3 * SECOND, 10, 0.1, "three seconds of pause")
    assert len(fired("tick")) == before

    assert resume_schedules(["tick"]) == 1
    resumed_at = database_now()
    wait_until(lambda: any(slot(j) > resumed_at for j in fired("tick")), 30, 0.1, "a fire after resume")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-3000:]
    # Slots that passed while paused were not fired afterwards either.
    assert not [j for j in fired("tick") if paused_at + SECOND < slot(j) <= resumed_at]


def test_demo_command__resumes_its_schedule_and_the_worker_fires_it(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "demo", "--jobs", "1"],
            cwd=ROOT,
            env=worker_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        tick = wait_until(
            lambda: Job.objects.filter(kind="demo_tick", state="completed").first(), 40, 0.2, "a demo_tick job run"
        )
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)
    assert tick.metadata["schedule"] == "demo_tick"
    assert datetime.fromisoformat(tick.metadata["fire_at"]).second % 10 == 0
    text = log.read_text(errors="replace")
    assert "schedule demo_tick fires every 10 s" in text
    assert f"tick schedule=demo_tick fire_at={tick.metadata['fire_at']} job={tick.pk}" in text
