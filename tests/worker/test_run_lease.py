"""The run_lease guard: a worker whose attempt was rescued and re-claimed elsewhere cannot
overwrite the newer attempt when its handler finally returns."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.sql import statements
from awa_django.worker import JobContext, QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates, row, wait_for_row

QUEUE = "lease"


@pytest.mark.django_db(transaction=True)
def test_run_lease__rescued_and_reclaimed_attempt__old_worker_cannot_complete_it(gates: Gates) -> None:
    started: list[int] = []

    async def gated(context: JobContext) -> None:
        started.append(context.run_lease)
        # Ignores context.cancelled on purpose: like a handler that never checks it, it keeps
        # running after its attempt was taken away.
        await gates.wait(context.run_lease)

    registry = Registry()
    registry.register(JobHandler("gated", gated, queue=QUEUE, takes_context=True))
    # One slot each, so A cannot take the job back while its first attempt still runs; a long
    # staleness, so no leader rescues the test's hand-made claims on its own.
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=1)}, heartbeat_staleness=60.0)
    job = Job.objects.enqueue("gated", queue=QUEUE)

    with running_worker(config, registry=registry) as worker_a:
        wait_until(lambda: job.pk in worker_a.in_flight and started == [1], what="A running attempt 1")
        claimed = row(job.pk)
        assert (claimed.state, claimed.attempt, claimed.run_lease) == ("running", 1, 1)

        with running_worker(config, registry=registry) as worker_b:
            # Behind A's back: A's heartbeat goes stale and the rescue statement hands the job back.
            with transaction.atomic(), connection.cursor() as cursor:
                Job.objects.filter(pk=job.pk).update(heartbeat_at=Now() - timedelta(hours=1))
                cursor.execute(statements["rescue_stale_jobs"], {"staleness": timedelta(minutes=1), "limit": 10})  # type: ignore[dict-item]
                assert [r[:2] for r in cursor.fetchall()] == [(job.pk, "retryable")]  # id, state, then the log fields

            # The leader promotes it and B, the only worker with a free slot, claims it.
            reclaimed = wait_for_row(job.pk, state="running", run_lease=3)
            assert reclaimed.attempt == 2
            wait_until(lambda: job.pk in worker_b.in_flight and started == [1, 3], what="B running attempt 2")
            # A's heartbeat finds the attempt gone and tells its handler.
            wait_until(lambda: worker_a.in_flight[job.pk].context.cancelled, what="A's handler told to stop")

            gates.open(1)  # A's handler returns; its completion must miss the lease guard
            wait_until(lambda: worker_a.completer.lost == 1, what="A's write refused")
            after = row(job.pk)
            assert (after.state, after.attempt, after.run_lease) == ("running", 2, 3)
            assert after.finalized_at is None
            assert worker_a.completer.written == 0
            # The refusal is answered first; the attempt's task ends on its next turn of the loop.
            wait_until(lambda: job.pk not in worker_a.in_flight, what="A's attempt ended")

            gates.open(3)
            done = wait_for_row(job.pk, state="completed")
        # Read once B has stopped: its writer counts the write a moment after the commit is seen.
        assert (worker_b.completer.written, worker_b.completer.lost) == (1, 0)

    assert (done.attempt, done.run_lease) == (2, 3)
    assert len(done.errors) == 1
    assert "rescued" in done.errors[0]["error"]
    assert done.errors[0]["attempt"] == 1
