"""Jobs waiting when a worker starts are claimed at once, not a poll interval later.

At start each runner reads its queue's fair-key settings and looks for keyed backlog before its
first claim, while the backlog probe makes its first look (the one that tells the runners of jobs
already waiting). The probe passed over a queue whose runner was "polling", taking it for a claim
that looks at the database itself, but that poll only read the key settings and, not hungry,
claimed nothing. Then nothing looked again until the poll interval: with LISTEN on, the listener's
look-now request saved it unless it came before the probe's first look (a CI run's 20 s timeout in
test_ran_dry); with LISTEN off (a transaction pooler) it never did. Reading the key settings is not
a claim now, so the probe's first look counts for every queue.

LISTEN off and a 60 s poll interval (and reload tick) here: only that first look can start the
jobs within the test's wait.
"""

from __future__ import annotations

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext, QueueConfig
from tests.harness import make_config, running_worker, wait_until


def _registry(queues: list[str], started: list[int]) -> Registry:
    async def note(context: JobContext) -> None:
        started.append(context.job.id)

    registry = Registry()
    for queue in queues:
        registry.register(JobHandler(f"note_{queue}", note, queue=queue, takes_context=True))
    return registry


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("global_max", [None, 4], ids=["hard_reserved", "weighted"])
@pytest.mark.parametrize("queues", [1, 3])
def test_jobs_waiting_at_start__are_claimed_by_the_first_backlog_look(global_max: int | None, queues: int) -> None:
    names = [f"atstart{i}" for i in range(queues)]
    ids = [Job.objects.enqueue(f"note_{name}", queue=name).pk for name in names for _ in range(2)]
    started: list[int] = []
    config = make_config(
        {name: QueueConfig(name, max_workers=2) for name in names},
        global_max_workers=global_max,
        poll_interval=60.0,
        reconfigure_interval=60.0,
        listen=False,
    )
    with running_worker(config, registry=_registry(names, started)):
        wait_until(lambda: len(started) == len(ids), what=f"the {len(ids)} jobs waiting at start started")
        wait_until(
            lambda: Job.objects.filter(pk__in=ids, state="completed").count() == len(ids),
            what="every job waiting at start completed",
        )
    assert sorted(started) == sorted(ids)
