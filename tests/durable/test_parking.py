"""Sleeps, waits and signals, attempt by attempt, in process: what each writes to the rows."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from django.db import connection

from awa_django.context import ClaimedJob, Outcome
from awa_django.exceptions import SignalError, WaitTimeout
from awa_django.models import Job
from awa_django.observability.joblog import report_outcome
from awa_django.observability.sink import NoopSink
from awa_django.services.jobs import cancel_jobs
from awa_django.states import JobState
from awa_django.worker import JobContext
from testproject.demo.models import Execution
from tests.durable.support import events_of, expire, registry_of, run_once, state_of, steps_of

QUEUE = "durable"
ran: Counter[tuple[int, str]] = Counter()


def _sleeper(context: JobContext) -> Any:
    a = context.step("a", lambda: ran.update([(context.job_id, "a")]) or "A")
    context.sleep(3600)
    b = context.step("b", lambda: ran.update([(context.job_id, "b")]) or "B")
    return [a, b]


@pytest.mark.django_db
def test_sleep__parks_scheduled_at_its_wake_time_without_spending_the_attempt_then_resumes() -> None:
    registry = registry_of("durable.sleeper", _sleeper, max_attempts=1)
    job = Job.objects.enqueue("durable.sleeper", {}, queue=QUEUE, max_attempts=1)
    first = run_once(job.id, registry)
    assert first is not None and first.state == "scheduled", first
    row = Job.objects.get(id=job.id)
    steps = steps_of(job.id)
    assert row.attempt == 0 and row.errors == []
    assert steps["sleep#1"].kind == "sleep" and steps["sleep#1"].wake_at is not None
    assert abs((row.run_at - steps["sleep#1"].wake_at).total_seconds()) < 60
    assert run_once(job.id, registry, now=row.run_at.replace(year=row.run_at.year - 1)) is None  # not due
    expire(job.id)
    second = run_once(job.id, registry)
    assert second is not None and second.state == "completed", second
    assert second.result == ["A", "B"]
    assert ran[(job.id, "a")] == 1 and ran[(job.id, "b")] == 1
    assert Job.objects.get(id=job.id).attempt == 1  # one attempt spent, of max_attempts=1


def _waiter(context: JobContext) -> Any:
    before = context.step("before", lambda: ran.update([(context.job_id, "before")]) or 1)
    try:
        approval = context.wait_for("approved", timeout=context.metadata.get("timeout"))
    except WaitTimeout:
        approval = "timed out"
    return [before, approval]


@pytest.mark.django_db
def test_wait_for__no_event__parks_waiting_then_a_signal_wakes_it_with_its_payload() -> None:
    registry = registry_of("durable.waiter", _waiter)
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)
    assert run_once(job.id, registry).state == "waiting"  # type: ignore[union-attr]
    assert state_of(job.id) == "waiting" and Job.objects.get(id=job.id).attempt == 0
    assert steps_of(job.id)["wait:approved#1"].finished_at is None
    assert run_once(job.id, registry) is None  # in no claim: nothing to run
    sent = Job.objects.signal(job.id, "approved", {"by": "ana"})
    assert sent.woke and sent.woke_queue == QUEUE
    assert state_of(job.id) == "available"
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed", run
    assert run.result == [1, {"by": "ana"}]
    assert ran[(job.id, "before")] == 1
    assert events_of(job.id) == []  # taken: its payload is the wait's result
    assert steps_of(job.id)["wait:approved#1"].result == {"by": "ana"}


@pytest.mark.django_db
def test_wait_for__event_sent_before_the_wait__is_kept_and_delivered_without_parking() -> None:
    registry = registry_of("durable.waiter", _waiter)
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)
    sent = Job.objects.signal(job.id, "approved", "early")
    assert not sent.woke and state_of(job.id) == "available"
    Job.objects.signal(job.id, "other", "ignored")
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed" and run.result == [1, "early"], run
    assert [e.event for e in events_of(job.id)] == ["other"]


@pytest.mark.django_db
def test_wait_for__signal_for_another_event__does_not_wake_it() -> None:
    registry = registry_of("durable.waiter", _waiter)
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)
    run_once(job.id, registry)
    assert not Job.objects.signal(job.id, "rejected").woke
    assert state_of(job.id) == "waiting"


@pytest.mark.django_db
def test_wait_for__timeout__parks_scheduled_then_raises_wait_timeout_at_the_deadline_and_after() -> None:
    registry = registry_of("durable.waiter", _waiter)
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE, metadata={"timeout": 600})
    assert run_once(job.id, registry).state == "scheduled"  # type: ignore[union-attr]
    wait = steps_of(job.id)["wait:approved#1"]
    assert wait.wake_at is not None and wait.finished_at is None
    expire(job.id)
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed" and run.result == [1, "timed out"], run
    wait = steps_of(job.id)["wait:approved#1"]
    assert wait.timed_out and wait.finished_at is not None
    # A later signal finds the job finished.
    with pytest.raises(SignalError, match=rf"job {job.id}: it has finished \(state completed\)"):
        Job.objects.signal(job.id, "approved")


@pytest.mark.django_db
def test_signal__to_a_job_that_does_not_exist__names_it() -> None:
    with pytest.raises(SignalError, match=r"cannot send event 'go' to job 987654321: no such job exists") as caught:
        Job.objects.signal(987654321, "go")
    assert caught.value.state is None and caught.value.job_id == 987654321


@pytest.mark.parametrize(
    ("event", "payload", "says"),
    [("", None, "non-empty string"), ("go", object(), "cannot be stored as JSON"), ("go", "a\x00b", "NUL")],
)
@pytest.mark.django_db
def test_signal__bad_event_or_payload__refused_naming_it(event: str, payload: Any, says: str) -> None:
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)
    with pytest.raises(ValueError, match=says):
        Job.objects.signal(job.id, event, payload)
    assert events_of(job.id) == []


@pytest.mark.django_db
def test_signal__joins_the_callers_transaction() -> None:
    from django.db import transaction

    registry = registry_of("durable.waiter", _waiter)
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)
    run_once(job.id, registry)
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.signal(job.id, "approved", 1)
        raise RuntimeError("the caller's transaction rolls back")
    assert events_of(job.id) == [] and state_of(job.id) == "waiting"


@pytest.mark.django_db
def test_cancel__a_parked_job__ends_cancelled_and_signals_are_refused() -> None:
    registry = registry_of("durable.waiter", _waiter)
    waiting = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)
    sleeping = Job.objects.enqueue("durable.sleeper", {}, queue=QUEUE)
    run_once(waiting.id, registry)
    run_once(sleeping.id, registry_of("durable.sleeper", _sleeper))
    assert {state_of(waiting.id), state_of(sleeping.id)} == {"waiting", "scheduled"}
    cancel_jobs([waiting.id, sleeping.id])
    assert state_of(waiting.id) == "cancelled" and state_of(sleeping.id) == "cancelled"
    with pytest.raises(SignalError, match="state cancelled"):
        Job.objects.signal(waiting.id, "approved")


def _atomic(context: JobContext) -> Any:
    def write(name: str) -> str:
        Execution.objects.create(job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=0)
        return name

    first = context.step("first", write, "one")
    if context.metadata.get("fail") and context.attempt == 1:
        raise RuntimeError("fails after the first step, in the same transaction")
    context.sleep(3600)
    return [first, context.step("second", write, "two")]


@pytest.mark.django_db
def test_atomic__steps_commit_with_the_handlers_transaction() -> None:
    registry = registry_of("durable.atomic", _atomic, atomic=True)
    failing = Job.objects.enqueue("durable.atomic", {}, queue=QUEUE, metadata={"fail": True})
    run = run_once(failing.id, registry)
    assert run is not None and run.state == "retryable"
    # Rolled back together: the step's record and its write.
    assert steps_of(failing.id) == {} and Execution.objects.filter(job_id=failing.id).count() == 0
    run = run_once(failing.id, registry)
    assert run is not None and run.state == "scheduled", run  # parked: committed with its writes
    assert set(steps_of(failing.id)) == {"first", "sleep#1"}
    assert Execution.objects.filter(job_id=failing.id).count() == 1
    expire(failing.id)
    run = run_once(failing.id, registry)
    assert run is not None and run.state == "completed" and run.result == ["one", "two"], run
    assert Execution.objects.filter(job_id=failing.id).count() == 2


async def _async_handler(context: JobContext) -> Any:
    async def fetch() -> str:
        ran.update([(context.job_id, "fetch")])
        return "fetched"

    value = await context.astep("fetch", fetch)
    payload = await context.await_for("go")
    await context.asleep(0)
    return [value, payload]


@pytest.mark.django_db
def test_async_handler__astep_await_for__park_and_resume() -> None:
    registry = registry_of("durable.async", _async_handler)
    job = Job.objects.enqueue("durable.async", {}, queue=QUEUE)
    assert run_once(job.id, registry).state == "waiting"  # type: ignore[union-attr]
    Job.objects.signal(job.id, "go", 7)
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed" and run.result == ["fetched", 7], run
    assert ran[(job.id, "fetch")] == 1


async def _wrong(context: JobContext) -> Any:
    return context.step("x", lambda: 1)


@pytest.mark.django_db
def test_async_handler__sync_step__fails_saying_to_await_astep() -> None:
    job = Job.objects.enqueue("durable.wrong", {}, queue=QUEUE, max_attempts=1)
    run = run_once(job.id, registry_of("durable.wrong", _wrong, max_attempts=1))
    assert run is not None and run.error is not None
    assert "astep" in run.error["error"]


@pytest.mark.django_db
def test_wake_after_park__event_kept_while_running__writer_wakes_it() -> None:
    """An event kept after the wait looked for it and before its park is written (a signal while
    the job runs: it finds it running, so wakes nothing) is seen by the park's writer, in the same
    transaction: the job is available again, not left waiting for an event it has."""
    registry = registry_of("durable.waiter", _waiter)
    job = Job.objects.enqueue("durable.waiter", {}, queue=QUEUE)

    def racing(context: JobContext) -> Any:
        context.step("before", lambda: 1)
        try:
            context.wait_for("approved")
        finally:
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO awa_job_event (job_id, event, payload) VALUES (%s, 'approved', '5')", [context.job_id]
                )
        return None

    run = run_once(job.id, registry_of("durable.waiter", racing))
    assert run is not None and run.state == "waiting"  # the park as written
    assert state_of(job.id) == "available"  # ... and woken in the same transaction
    run = run_once(job.id, registry)
    assert run is not None and run.result == [1, 5], run


@pytest.mark.parametrize("state", [JobState.SCHEDULED, JobState.WAITING])
def test_report_outcome__a_parked_attempt__counted_and_logged_as_parked(
    state: JobState, caplog: pytest.LogCaptureFixture
) -> None:
    finished: list[str] = []

    class Sink(NoopSink):
        def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
            finished.append(outcome)

    job = ClaimedJob(1, "durable.waiter", QUEUE, {}, 1, 3, 1, 2, {})
    outcome = Outcome(state, delay=None if state is JobState.WAITING else 60.0, refund=1, parked=True)
    with caplog.at_level(logging.INFO, logger="awa_django.jobs"):
        report_outcome(Sink(), registry_of("durable.waiter", _waiter), job, outcome, 0.01, True)
    assert finished == ["parked"]
    assert [record.outcome for record in caplog.records] == ["parked"]  # type: ignore[attr-defined]


def _sleeps_for(context: JobContext) -> Any:
    context.sleep(float(context.metadata["seconds"]))
    return "woke"


def _waits_for(context: JobContext) -> Any:
    return context.wait_for("approved", timeout=float(context.metadata["seconds"]))


@pytest.mark.parametrize("handler", [_sleeps_for, _waits_for])
@pytest.mark.parametrize("seconds", ["nan", "inf", "1e20", "-1e20"])
@pytest.mark.django_db
def test_sleep_and_wait_for__a_duration_no_timestamp_holds__fail_the_job_naming_it(handler: Any, seconds: str) -> None:
    """NaN, infinity and durations past any timestamp are refused with a StepError naming the value
    (the job fails at once), not sent to Postgres: there they broke the attempt with a database
    error, or wrote a wake time of 'infinity' that no later attempt could read back."""
    registry = registry_of("durable.duration", handler)
    job = Job.objects.enqueue("durable.duration", {}, queue=QUEUE, metadata={"seconds": seconds})

    run = run_once(job.id, registry)

    assert run is not None and run.state == "failed", run
    error = Job.objects.get(id=job.id).errors[-1]
    assert error["exception"] == "awa_django.exceptions.StepError"
    assert repr(float(seconds)) in error["error"]
    assert steps_of(job.id) == {}  # nothing was recorded


def _sleeps_in_a_block(context: JobContext) -> Any:
    from django.db import transaction

    with transaction.atomic():
        Execution.objects.create(job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=1)
        context.sleep(3600)
    return "woke"


def _waits_in_a_block(context: JobContext) -> Any:
    from django.db import transaction

    with transaction.atomic():
        return context.wait_for("approved")


@pytest.mark.parametrize("atomic", [False, True])
@pytest.mark.parametrize(
    ("kind", "handler", "says"),
    [("sleeper", _sleeps_in_a_block, "sleep inside"), ("waiter", _waits_in_a_block, "wait_for inside")],
)
@pytest.mark.django_db
def test_park_inside_a_transaction_atomic_block__fails_saying_so_not_parked_for_ever(
    atomic: bool, kind: str, handler: Any, says: str
) -> None:
    """The park ends the attempt by raising through the handler's own ``transaction.atomic()``
    block, which rolls back on any exception: the sleep's or wait's record went with it while the
    park was written. A sleeping job then slept again at every resume, and a waiting one waited
    where no signal looks (signal_job wakes a job with a wait in force), for ever. Refused instead,
    at once, naming the rule."""
    registry = registry_of(f"durable.block_{kind}", handler, atomic=atomic)
    job = Job.objects.enqueue(f"durable.block_{kind}", {}, queue=QUEUE)
    run = run_once(job.id, registry)
    assert run is not None
    row = Job.objects.get(id=job.id)
    assert (row.state, steps_of(job.id)) == ("failed", {}), (row.state, row.errors, steps_of(job.id))
    assert says in row.errors[-1]["error"] and "transaction.atomic() block" in row.errors[-1]["error"]
    assert Execution.objects.filter(job_id=job.id).count() == 0


def _parks_after_a_block(context: JobContext) -> Any:
    from django.db import transaction

    with transaction.atomic():
        first = context.step("first", lambda: "one")
    context.sleep(3600)
    return first


@pytest.mark.parametrize("atomic", [False, True])
@pytest.mark.django_db
def test_park_after_a_transaction_atomic_block__parks_and_resumes(atomic: bool) -> None:
    registry = registry_of("durable.after_block", _parks_after_a_block, atomic=atomic)
    job = Job.objects.enqueue("durable.after_block", {}, queue=QUEUE)
    assert run_once(job.id, registry).state == "scheduled"  # type: ignore[union-attr]
    assert set(steps_of(job.id)) == {"first", "sleep#1"}
    expire(job.id)
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed" and run.result == "one", run
