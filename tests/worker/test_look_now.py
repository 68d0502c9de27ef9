"""A request to look now reaches a queue that is in its own claim, too.

The listener asks the backlog probe to look at every queue when it (re)connects: NOTIFYs may have
been missed meanwhile. The probe passes over a queue whose own claim is under way, since that claim
looks at the database itself; but a claim that began before the unannounced jobs were committed
comes back without them, and the queue then believed it had run dry. Nothing looked again until the
poll interval. Now the probe owes such a queue a look, taken once its poll ends (a claim of its
own begun after the request answers it too; a poll that claims nothing does not). Also here: a
hand-over claim out when the probe sees due jobs, and a failed probe query. The owed looks'
bookkeeping, over any order of events, is ``Backlog``'s: tests/worker/test_backlog.py.

LISTEN off and a 60 s poll interval in the worker tests, so that only the look asked for can
start the job within the test's wait.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from awa_django.context import ClaimedJob
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext, QueueConfig, Worker, WorkerConfig
from awa_django.worker.backlog import ProbeSeen
from awa_django.worker.claims import Claim
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates, gated_registry

QUEUE = "looknow"


def noting_registry(started: list[int]) -> Registry:
    """One kind, ``note`` (in QUEUE), that notes its job's id in ``started``."""

    async def note(context: JobContext) -> None:
        started.append(context.job.id)

    registry = Registry()
    registry.register(JobHandler("note", note, queue=QUEUE, takes_context=True))
    return registry


def quiet_config(max_workers: int = 2, global_max: int | None = None) -> WorkerConfig:
    """LISTEN off, a 60 s poll interval and reload tick: within a test's wait, only a look asked
    for can find a job nobody announced."""
    return make_config(
        {QUEUE: QueueConfig(QUEUE, max_workers=max_workers)},
        global_max_workers=global_max,
        poll_interval=60.0,
        reconfigure_interval=60.0,
        listen=False,
    )


def ask_for_a_look(worker: Worker) -> None:
    """``probe.look_now()`` on the worker's loop, as the listener calls it when it (re)connects;
    returns once it has run."""
    loop, asked = worker.loop, threading.Event()
    assert loop is not None

    def look_now() -> None:
        worker.probe.look_now()
        asked.set()

    loop.call_soon_threadsafe(look_now)
    wait_until(asked.is_set, what="the look-now request was made")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("global_max", [None, 4], ids=["hard_reserved", "weighted"])
def test_look_now_while_the_queue_claims__it_looks_again_after_its_claim(global_max: int | None) -> None:
    started: list[int] = []
    with running_worker(quiet_config(global_max=global_max), registry=noting_registry(started)) as worker:
        loop, runner = worker.loop, worker.runners[QUEUE]
        assert loop is not None
        claimed, let_go = threading.Event(), threading.Event()
        source = runner.source
        run = source.run

        async def held_run(pool: Any, claim: Claim, looks: Any) -> list[ClaimedJob]:
            got = await run(pool, claim, looks)
            if not claimed.is_set():
                assert got == [], got  # the queue is empty when this claim runs
                claimed.set()
                await loop.run_in_executor(None, let_go.wait)
            return got

        source.run = held_run  # type: ignore[method-assign]
        loop.call_soon_threadsafe(runner.nudge)
        wait_until(claimed.is_set, what="the runner's claim ran")
        # Committed after the claim's statement: with LISTEN off nobody announces it.
        job = Job.objects.enqueue("note", queue=QUEUE)
        ask_for_a_look(worker)
        let_go.set()
        wait_until(lambda: started == [job.pk], what="the job committed during the claim started")


@pytest.mark.django_db(transaction=True)
def test_a_failed_probe__looks_again_when_asked_not_a_poll_interval_later() -> None:
    """The probe's query failed (the database went away): once the listener is back and asks for a
    look, the probe looks then, not after the rest of its poll interval."""
    started: list[int] = []
    with running_worker(quiet_config(), registry=noting_registry(started)) as worker:
        probe, failed = worker.probe, threading.Event()
        params = probe.params

        def failing_params(queues: list[str]) -> dict[str, list[object]]:
            if not failed.is_set():
                failed.set()
                raise psycopg.OperationalError("the test's stand-in for a lost connection")
            return params(queues)

        probe.params = failing_params  # type: ignore[method-assign]
        job = Job.objects.enqueue("note", queue=QUEUE)  # with LISTEN off, only the probe finds it
        ask_for_a_look(worker)
        wait_until(failed.is_set, what="the probe's query failed")
        ask_for_a_look(worker)  # what the listener does once it has reconnected
        wait_until(lambda: started == [job.pk], what="the job found by the look after the failure started")


@pytest.mark.django_db(transaction=True)
def test_backlog_seen_while_a_hand_over_claims__the_queue_looks_again_after_it() -> None:
    """The writer's hand-over claim for a hungry queue began before a job nobody announced was
    committed, and comes back empty. The probe saw the job meanwhile: its verdict must outlast the
    hand-over's answer, or the queue believes it ran dry until the next poll interval."""
    gates, started = Gates(), list[int]()
    registry = gated_registry(gates, started, QUEUE)
    first = Job.objects.enqueue("gated", queue=QUEUE).pk
    second = Job.objects.enqueue("gated", queue=QUEUE).pk
    with running_worker(quiet_config(max_workers=1), registry=registry) as worker:
        loop, runners = worker.loop, worker.runners
        assert loop is not None
        wait_until(lambda: started == [first], what="the first job started")
        # The first claim filled its one slot and left the second due, so the queue is hungry and
        # the first job's end carries a hand-over claim. Cancelled, the second is not there for it.
        Job.objects.filter(pk=second).update(state="cancelled")
        handed, let_go, judged = threading.Event(), threading.Event(), threading.Event()
        write = worker.completer._write

        async def held_write(*args: Any, **kwargs: Any) -> Any:
            written, claimed = await write(*args, **kwargs)
            if QUEUE in claimed and not handed.is_set():
                assert claimed[QUEUE] == [], claimed
                handed.set()
                await loop.run_in_executor(None, let_go.wait)
            return written, claimed

        runner = runners[QUEUE]
        verdict = runner.backlog_verdict

        def noted_verdict(ready: bool, seen: ProbeSeen) -> None:
            verdict(ready, seen)
            if ready:
                judged.set()

        worker.completer._write = held_write  # type: ignore[method-assign]
        runner.backlog_verdict = noted_verdict  # type: ignore[method-assign]
        gates.open(first)
        wait_until(handed.is_set, what="the hand-over claim came back empty")
        third = Job.objects.enqueue("gated", queue=QUEUE).pk  # LISTEN off: nobody announces it
        ask_for_a_look(worker)
        wait_until(judged.is_set, what="the probe saw the third job")
        let_go.set()
        wait_until(lambda: started == [first, third], what="the third job started")
        gates.open(third)
