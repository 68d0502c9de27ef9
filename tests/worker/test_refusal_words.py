"""A finished attempt whose write the (id, running, run_lease) guard refuses is named for what
happened to its row: cancelled or deleted while running is "discarded" (its log line says "job
cancelled while running": "discard" is ``discard_on``'s word), handed back at shutdown is
"handed_back", and only a rescue under a newer lease is "lost". Normal operations never say lost."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from awa_django.context import COMPLETED, ClaimedJob, JobContext
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.services.jobs import cancel_jobs, discard_jobs
from awa_django.sql import statements
from awa_django.worker.completer import Completer
from awa_django.worker.db import make_pool
from tests.harness import make_config, running_worker, wait_until

QUEUE = "refusals"


def _running_row() -> ClaimedJob:
    job = Job.objects.enqueue("noop", queue=QUEUE)
    Job.objects.filter(pk=job.pk).update(state="running", attempt=1, run_lease=1)
    return ClaimedJob(job.pk, "noop", QUEUE, {}, 1, 25, 1, 2, {})


def _release(job: ClaimedJob) -> None:
    """What the supervisor's hand-back writes for a job that outlasted the shutdown timeout."""
    with connection.cursor() as cursor:
        cursor.execute(statements["release_jobs"], {"ids": [job.id], "leases": [job.run_lease], "reason": "stop"})


def _rescue(job: ClaimedJob) -> None:
    Job.objects.filter(pk=job.id).update(state="retryable", run_lease=job.run_lease + 1)


def _write_refused(change: Callable[[ClaimedJob], None], handed_back: bool) -> tuple[Completer, bool, str]:
    job = _running_row()
    change(job)

    async def scenario() -> tuple[Completer, bool, str]:
        pool = make_pool("default", 2)
        await pool.open(wait=True, timeout=10)
        completer = Completer(pool)
        if handed_back:
            completer.note_handed_back([job.id])
        writer = asyncio.create_task(completer.run())
        try:
            stored = await asyncio.wait_for(completer.submit(job, COMPLETED), 30)
            return completer, stored, completer.refusal(job.id)
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            await pool.close()

    return asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("change", "handed_back", "named", "words"),
    [
        (lambda job: cancel_jobs([job.id]), False, "discarded", "job cancelled while running job_id="),
        (lambda job: discard_jobs([job.id]), False, "discarded", "cancelled (or deleted) the job while it ran"),
        (_release, True, "handed_back", "job handed_back job_id="),
        (_rescue, False, "lost", "rescued meanwhile"),
    ],
    ids=["cancelled", "deleted", "handed-back", "rescued"],
)
def test_refused_write__named_for_what_happened_to_the_row(
    change: Callable[[ClaimedJob], None],
    handed_back: bool,
    named: str,
    words: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="awa_django.jobs"):
        completer, stored, refusal = _write_refused(change, handed_back)
    assert stored is False
    assert refusal == named
    counts = {"discarded": completer.discarded, "handed_back": completer.handed_back, "lost": completer.lost}
    assert counts == {name: int(name == named) for name in counts}
    lines = [r for r in caplog.records if r.name == "awa_django.jobs"]
    assert [getattr(r, "outcome", None) for r in lines] == [named]
    message = lines[0].getMessage()
    assert words in message
    assert "discard" not in message  # discard_on's word: failed at once, never a cancel
    if named != "lost":
        assert "lost" not in message
        assert lines[0].levelno == logging.INFO
    else:
        assert lines[0].levelno == logging.WARNING


@pytest.mark.django_db(transaction=True)
def test_cooperative_cancel__handler_returns_normally__no_lost_in_any_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = threading.Event()

    def wait_for_cancel(context: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 30
        while not context.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        return "stopped as asked"

    registry = Registry()
    registry.register(JobHandler("wait_for_cancel", wait_for_cancel, queue=QUEUE, takes_context=True))
    job = Job.objects.enqueue("wait_for_cancel", queue=QUEUE)
    with caplog.at_level(logging.INFO, logger="awa_django"):
        with running_worker(make_config([QUEUE]), registry=registry) as worker:
            assert started.wait(20), "the handler never started"
            assert cancel_jobs([job.pk]) == 1
            wait_until(lambda: worker.completer.discarded == 1, what="the refused write named")
            assert worker.completer.lost == 0
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "lost" in m] == []
    assert any(m.startswith(f"job cancelled while running job_id={job.pk} ") for m in said), said
    stopped = [m for m in said if m.startswith("worker stopped")]
    assert len(stopped) == 1 and stopped[0].endswith("written=0 discarded=1"), stopped
