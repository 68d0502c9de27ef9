"""Every job runs exactly once: a thousand jobs over three queues, counted by the handler."""

from __future__ import annotations

from collections import Counter

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext
from tests.harness import make_config, running_worker, wait_until

QUEUES = ["alpha", "beta", "gamma"]


@pytest.mark.django_db(transaction=True)
def test_worker__1000_jobs_over_3_queues__each_completes_exactly_once() -> None:
    executions: Counter[int] = Counter()

    async def count(context: JobContext) -> None:
        executions[context.job_id] += 1  # the worker's loop is one thread: no lock needed

    registry = Registry()
    registry.register(JobHandler("count", count, takes_context=True))
    Job.objects.enqueue_many([{"kind": "count", "queue": QUEUES[i % 3]} for i in range(1000)])
    ids = set(Job.objects.values_list("id", flat=True))
    assert len(ids) == 1000

    with running_worker(make_config(QUEUES), registry=registry) as worker:
        wait_until(lambda: Job.objects.completed().count() == 1000, timeout=120, what="1000 completed jobs")

    assert set(executions) == ids
    assert {job_id: n for job_id, n in executions.items() if n != 1} == {}
    assert Job.objects.exclude(state="completed").count() == 0
    assert set(Job.objects.values_list("attempt", flat=True)) == {1}
    assert Job.objects.filter(finalized_at__isnull=True).count() == 0
    assert Counter(Job.objects.values_list("queue", flat=True)) == {"alpha": 334, "beta": 333, "gamma": 333}
    assert {name: r.claimed_total for name, r in worker.runners.items()} == {
        "alpha": 334,
        "beta": 333,
        "gamma": 333,
    }
    assert (worker.completer.written, worker.completer.lost) == (1000, 0)
