"""A worker serving 1,000 queues, started idle, then loaded with one job per queue: it runs
them all, in both modes. Measured on a real ``awa_worker`` subprocess, from the jobs' rows.

What the idle worker costs is a figure, not a property: it is measured in bench/README.md
("Idle cost with 1,000 queues"), as every other timing and resource figure is.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from awa_django.models import Job, Queue, WorkerInstance
from tests.harness import wait_until
from tests.worker.support import Spawner

QUEUES = [f"many_{i:04d}" for i in range(1000)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["weighted", "hard_reserved"])
def test_thousand_queues__worker_started_idle_runs_one_job_per_queue(spawn: Spawner, mode: str) -> None:
    Queue.objects.bulk_create([Queue(name=name, max_workers=2) for name in QUEUES])
    args = ["--global-max-workers", "50"] if mode == "weighted" else []
    worker = spawn(*args, "--poll-interval", "0.5", name=f"many-{mode}")
    wait_until(
        lambda: WorkerInstance.objects.filter(pid=worker.process.pid).exists(), 60, 0.1, "the worker's first snapshot"
    )
    worker.assert_alive()

    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": "noop", "queue": name} for name in QUEUES])
    done = Job.objects.filter(queue__in=QUEUES, state="completed")
    wait_until(lambda: done.count() == len(QUEUES), 30, 0.05, "one job per queue to complete on all 1,000 queues")
    worker.assert_alive()
    assert not Job.objects.filter(queue__in=QUEUES).exclude(state="completed").exists()
