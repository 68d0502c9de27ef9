"""A worker serving 1,000 queues: idle, it costs next to nothing (no claim per queue per poll
interval: one backlog probe for all of them); loaded with one job per queue, it runs them all.

Measured on a real ``awa_worker`` subprocess: its CPU time from /proc, the jobs from their rows.
"""

from __future__ import annotations

import os
import time

import pytest
from django.db import transaction

from awa_django.models import Job, Queue, WorkerInstance
from tests.harness import wait_until
from tests.worker.support import Spawner

QUEUES = [f"many_{i:04d}" for i in range(1000)]
IDLE_WINDOW = 5.0  # seconds of idle CPU measured


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["weighted", "hard_reserved"])
def test_thousand_queues__idle_worker_is_cheap_and_runs_one_job_per_queue(spawn: Spawner, mode: str) -> None:
    Queue.objects.bulk_create([Queue(name=name, max_workers=2) for name in QUEUES])
    args = ["--global-max-workers", "50"] if mode == "weighted" else []
    worker = spawn(*args, "--poll-interval", "0.5", name=f"many-{mode}")
    wait_until(
        lambda: WorkerInstance.objects.filter(pid=worker.process.pid).exists(), 60, 0.1, "the worker's first snapshot"
    )
    worker.assert_alive()

    before, started = _cpu_seconds(worker.process.pid), time.monotonic()
    time.sleep(IDLE_WINDOW)  # the measuring window itself, not a wait for a condition
    idle = (_cpu_seconds(worker.process.pid) - before) / (time.monotonic() - started)

    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": "noop", "queue": name} for name in QUEUES])
    done = Job.objects.filter(queue__in=QUEUES, state="completed")
    wait_until(lambda: done.count() == len(QUEUES), 30, 0.05, "one job per queue to complete on all 1,000 queues")
    worker.assert_alive()
    assert idle < 0.10, f"an idle worker with 1,000 queues used {idle:.1%} of a core"
    assert not Job.objects.filter(queue__in=QUEUES).exclude(state="completed").exists()
