"""A second signal ends the worker process whatever holds it: here a handler that swallows every
cancellation (before, asyncio's own clean-up then waited for it forever; only SIGKILL helped)."""

from __future__ import annotations

import signal

import pytest

from awa_django.models import Job
from tests.harness import wait_until
from tests.worker.support import Spawner


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_second_sigterm__handler_swallowing_cancellation__process_still_ends(spawn: Spawner) -> None:
    job = Job.objects.enqueue("ignore_cancel", {"seconds": 300}, queue="stubborn")
    worker = spawn("-q", "stubborn", "--shutdown-timeout", "600", "--poll-interval", "0.5", name="stubborn")
    wait_until(lambda: Job.objects.running().filter(pk=job.pk).exists(), timeout=60, what="the job running")

    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping: no new claims" in worker.log, timeout=30, what="the first signal's log line")
    worker.signal(signal.SIGTERM)

    # Far below the 600 s shutdown timeout and the handler's 300 s: the second signal ended it.
    assert worker.wait_exit(timeout=30) != 0
    assert "second stop request" in worker.log
    assert Job.objects.get(pk=job.pk).state == "running"  # left to the rescue, as a forced stop does


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_one_sigterm__handler_swallowing_cancellation__handed_back_and_the_process_ends(spawn: Spawner) -> None:
    """One signal, a handler that outlasts the shutdown timeout and swallows its cancellation: the
    job is handed back (retryable) and the worker exits, as a sync handler's thread left running
    does. Before, the hand-back was written, and then asyncio's clean-up of the event loop waited
    for the handler to end by itself (300 s here): the process outlived every shutdown timeout,
    until an orchestrator's SIGKILL."""
    job = Job.objects.enqueue("ignore_cancel", {"seconds": 300}, queue="stubborn")
    worker = spawn("-q", "stubborn", "--shutdown-timeout", "1", "--poll-interval", "0.5", name="stubborn")
    wait_until(lambda: Job.objects.running().filter(pk=job.pk).exists(), timeout=60, what="the job running")

    worker.signal(signal.SIGTERM)

    assert worker.wait_exit(timeout=60) == 1, worker.log[-4000:]  # as with a sync handler left running
    assert "second stop request" not in worker.log
    assert "still running" in worker.log  # the exit says why it did not wait
    handed_back = Job.objects.get(pk=job.pk)
    assert handed_back.state == "retryable", (handed_back.state, handed_back.errors)
    assert "shutdown timeout" in handed_back.errors[-1]["error"]
