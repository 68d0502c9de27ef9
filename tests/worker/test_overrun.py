"""A sync handler past its deadline keeps its slot until its thread returns (issue 10).

Python cannot stop a thread, so the attempt ends at the deadline (its row is written retryable
at once) while the thread runs on; the permit stays taken until the thread returns, so no more
handlers execute than the queue's slots, and the snapshot counts such threads.
"""

from __future__ import annotations

import threading

import pytest

from awa_django.models import Job, WorkerInstance
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext, QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import row, wait_for_row

QUEUE = "overrun"
DEADLINE = 0.3


@pytest.mark.django_db(transaction=True)
def test_overrun__sync_handler_past_its_deadline__row_retryable_at_once_but_slot_held_until_thread_returns() -> None:
    release = threading.Event()
    ran: list[int] = []

    def stubborn(context: JobContext) -> None:
        ran.append(context.job_id)
        release.wait(60)  # ignores its deadline, as blocking code does

    async def quick() -> None:
        pass

    registry = Registry()
    registry.register(JobHandler("stubborn", stubborn, queue=QUEUE, takes_context=True))
    registry.register(JobHandler("quick", quick, queue=QUEUE))
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=1, deadline=DEADLINE)}, sync_threads=2)
    try:
        with running_worker(config, registry) as worker:
            slow = Job.objects.enqueue("stubborn", {}, queue=QUEUE)
            # The attempt ends at the deadline: written by the worker, or rescued by the maintenance
            # leader when its deadline_at passes first (both say why); due again at once either way.
            overran = wait_until(
                lambda: (job := row(slow.pk)).state in ("retryable", "available") and job.errors and job,
                what="the attempt ended for its deadline",
            )
            assert "deadline exceeded" in overran.errors[0]["error"], overran.errors
            wait_until(lambda: worker.overrunning == {slow.pk}, what="the overrunning thread counted")

            waiting = Job.objects.enqueue("quick", {}, queue=QUEUE)
            # The one slot is still taken by the thread: nothing more can be claimed.
            wait_until(
                lambda: WorkerInstance.objects.filter(flags__sync_overrunning=1, flags__in_flight=0).exists(),
                what="a snapshot counting the overrunning thread",
            )
            capacity = worker.allocator.snapshot()[QUEUE]
            assert (capacity["in_flight"], capacity["available"]) == (1, 0), capacity
            assert row(waiting.pk).state == "available"
            assert ran == [slow.pk]  # due again, but not run again while its thread holds the slot

            release.set()  # the thread returns: the slot is freed and the waiting job runs
            wait_for_row(waiting.pk, state="completed")
            wait_until(lambda: not worker.overrunning, what="the overrun count back to 0")
            wait_until(
                lambda: WorkerInstance.objects.filter(flags__sync_overrunning=0).exists(),
                what="a snapshot with no overrunning thread",
            )
    finally:
        release.set()
