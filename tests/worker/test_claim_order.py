"""Jobs that become available behind the lane cursors, under concurrent worker processes.

Two ``awa_worker`` subprocesses drain a backlog of one queue (their lane cursors move through it)
while jobs become available behind those cursors in every way there is: inserted with a past
run_at, scheduled and promoted when due, retried after a failure (the maintenance leader promotes
the retries), and aged into a higher priority lane. Every job must end terminal, and every attempt
must run exactly once: the ``record`` handler writes one Execution row per run, and a ``fail``
job's error history holds one entry per attempt.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from awa_django.models import Job, Queue, WorkerInstance
from testproject.demo.models import Execution
from tests.harness import wait_until
from tests.worker.support import Spawner

QUEUE = "lanes"
WORKER_ARGS = ("-q", QUEUE, "--poll-interval", "0.5", "--heartbeat-interval", "0.5")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_claim__jobs_available_behind_the_cursors__none_skipped_none_run_twice(spawn: Spawner) -> None:
    # Few slots, so the backlog takes a while and the cursors are mid-lane when the rest arrives;
    # priority aging after one second moves waiting jobs into the lanes above.
    Queue.objects.create(name=QUEUE, max_workers=4, priority_aging=timedelta(seconds=1))
    backlog = [{"kind": "record", "queue": QUEUE, "priority": 2 + i % 3, "args": {"seconds": 0.01}} for i in range(400)]
    Job.objects.enqueue_many(backlog)
    # The lowest lane has waited ten seconds already: the leader's first rounds age it upwards
    # while the lanes above keep the slots busy.
    waited = list(Job.objects.filter(queue=QUEUE, priority=4).values_list("id", flat=True))
    Job.objects.filter(pk__in=waited).update(run_at=timezone.now() - timedelta(seconds=10))
    # The second starts once the first is up: two workers starting at the same instant can both
    # insert the code's schedules (a unique-name race of the cron sync, not of the claim).
    workers = [spawn(*WORKER_ARGS, name="w0")]
    wait_until(lambda: WorkerInstance.objects.exists(), timeout=60, what="the first worker up")
    workers.append(spawn(*WORKER_ARGS, name="w1"))
    wait_until(lambda: Execution.objects.count() >= 60, timeout=60, what="the workers under way")

    long_ago = timezone.now() - timedelta(hours=1)
    late = [Job.objects.enqueue("record", {}, queue=QUEUE, priority=1 + i % 4, run_at=long_ago).pk for i in range(40)]
    soon = timezone.now() + timedelta(seconds=1)
    scheduled = [Job.objects.enqueue("record", {}, queue=QUEUE, priority=1 + i % 4, run_at=soon).pk for i in range(40)]
    assert Job.objects.filter(pk__in=scheduled, state="scheduled").count() == 40
    failing = [Job.objects.enqueue("fail", {}, queue=QUEUE, priority=1 + i % 4, max_attempts=3).pk for i in range(12)]

    def settled() -> bool:
        for worker in workers:
            worker.assert_alive()
        return not Job.objects.filter(queue=QUEUE).exclude(state__in=["completed", "failed"]).exists()

    try:
        wait_until(settled, timeout=120, interval=0.2, what="every job of the queue terminal")
    except AssertionError as exc:
        left = list(
            Job.objects.filter(queue=QUEUE)
            .exclude(state__in=["completed", "failed"])
            .values_list("id", "state", "priority", "run_at", "attempt")[:20]
        )
        raise AssertionError(f"{exc}; not terminal: {left}; logs: {workers[0].log[-3000:]}") from None

    records = set(Job.objects.filter(queue=QUEUE, kind="record").values_list("id", flat=True))
    assert len(records) == 400 + 40 + 40
    assert set(late) | set(scheduled) <= records
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    assert set(runs) == records, f"never run: {sorted(records - set(runs))[:20]}"
    assert {job_id: n for job_id, n in runs.items() if n != 1} == {}
    assert Job.objects.filter(pk__in=records, state="completed", attempt=1).count() == len(records)
    for job in Job.objects.filter(pk__in=failing):
        assert (job.state, job.attempt, len(job.errors)) == ("failed", 3, 3), (job.pk, job.state, job.errors)
    # Aging moved waiting jobs up into lanes whose cursors had moved on.
    assert Job.objects.filter(pk__in=waited, priority__lt=4).exists()
