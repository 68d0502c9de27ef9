"""``@job(atomic=True)``: a handler's writes commit with its completion, or not at all.

The handlers write ``Execution`` rows (testproject's demo model) on their own Django connection
in the worker's thread pool; the tests read them from another connection, so what they see is
what committed. Composition: the jobs a handler enqueues, a workflow's release, a lost lease.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import transaction

from awa_django.exceptions import TerminalError
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry, RegistryError, job
from awa_django.registry import registry as global_registry
from awa_django.services.jobs import cancel_jobs
from awa_django.worker import JobContext
from awa_django.worker.atomic import ATOMIC_ENTRY_KEY, RolledBackError
from awa_django.workflows import Workflow
from testproject.demo.models import Execution
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import rescue_running, wait_for_row

QUEUE = "atomic"


def _write(context: JobContext) -> None:
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=os.getpid()
    )


def _executions(job_id: int) -> list[tuple[int, int]]:
    return list(Execution.objects.filter(job_id=job_id).order_by("id").values_list("attempt", "run_lease"))


def _registry(*handlers: tuple[str, Callable[..., Any]], atomic: bool = True) -> Registry:
    registry = Registry()
    for kind, func in handlers:
        registry.register(JobHandler(kind, func, queue=QUEUE, takes_context=True, atomic=atomic, max_attempts=3))
    return registry


# --- declaration -----------------------------------------------------------------------------


def test_job__atomic_async_handler__refused_naming_the_handler_and_the_fix() -> None:
    async def charge(order_id: int) -> None: ...

    with pytest.raises(RegistryError) as raised:
        job("atomic_async_refused", atomic=True)(charge)
    message = str(raised.value)
    assert "'atomic_async_refused'" in message
    assert "charge" in message
    assert "async def" in message
    assert "Write it as def" in message
    assert "atomic_async_refused" not in global_registry


def test_job__atomic_not_a_bool__refused() -> None:
    def charge(order_id: int) -> None: ...

    with pytest.raises(RegistryError, match=r"atomic='yes' must be True or False"):
        job("atomic_not_bool", atomic="yes")(charge)  # type: ignore[arg-type]


def test_job_handler__atomic_async__refused_when_built_directly() -> None:
    async def charge() -> None: ...

    with pytest.raises(RegistryError, match="atomic=True needs a plain def handler"):
        JobHandler("direct", charge, atomic=True)


def test_job__atomic_def_handler__registered_atomic() -> None:
    def charge(order_id: int) -> None: ...

    handler = job("atomic_def_ok", atomic=True)(charge)
    try:
        assert handler.atomic is True
        assert global_registry.get("atomic_def_ok") is handler
    finally:
        global_registry.unregister("atomic_def_ok")


# --- in a worker -----------------------------------------------------------------------------


@pytest.fixture
def worker_for() -> Iterator[Callable[[Registry], Any]]:
    """Start one worker on QUEUE with the registry given (left running until the test ends)."""
    stack: list[Any] = []

    def start(registry: Registry) -> Any:
        manager = running_worker(make_config([QUEUE]), registry=registry)
        worker = manager.__enter__()
        stack.append(manager)
        return worker

    try:
        yield start
    finally:
        for manager in reversed(stack):
            manager.__exit__(None, None, None)


@pytest.fixture
def gate(worker_for: Callable[[Registry], Any]) -> Iterator[threading.Event]:
    """An event handlers wait on; set at teardown (before the worker stops), so a failed test
    leaves no handler waiting."""
    event = threading.Event()
    try:
        yield event
    finally:
        event.set()


@pytest.mark.django_db(transaction=True)
def test_atomic__returned__writes_and_completion_commit_together(worker_for: Callable[[Registry], Any]) -> None:
    def handler(context: JobContext) -> dict[str, int]:
        _write(context)
        return {"charged": 1}

    worker = worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    row = wait_for_row(job_id, state="completed")
    assert row.result == {"charged": 1}
    assert _executions(job_id) == [(1, row.run_lease)]
    assert row.errors == []
    # Counted as written, by the handler's own transaction: the count moves once the commit has
    # returned to the worker, a moment after the row reads completed (a loaded machine saw 0).
    wait_until(lambda: worker.completer.written == 1, what="the attempt counted as written")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("raised", "state"),
    [(ValueError("declined"), "retryable"), (TerminalError("card stolen"), "failed")],
    ids=["retry", "terminal"],
)
def test_atomic__raised__writes_rolled_back_and_entry_says_atomic(
    worker_for: Callable[[Registry], Any], raised: Exception, state: str
) -> None:
    def handler(context: JobContext) -> None:
        _write(context)
        Job.objects.enqueue("follow_up", {}, queue="elsewhere")
        raise raised

    worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    row = wait_for_row(job_id, state=state)
    assert _executions(job_id) == []
    assert not Job.objects.filter(kind="follow_up").exists()  # its enqueue rolled back too
    (entry,) = row.errors
    assert entry[ATOMIC_ENTRY_KEY] is True
    assert str(raised) in entry["error"]


@pytest.mark.django_db(transaction=True)
def test_atomic__marked_for_rollback__retried_with_the_reason(worker_for: Callable[[Registry], Any]) -> None:
    def handler(context: JobContext) -> None:
        _write(context)
        transaction.set_rollback(True)

    worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    row = wait_for_row(job_id, state="retryable")
    assert _executions(job_id) == []
    (entry,) = row.errors
    assert RolledBackError.__name__ in entry["error"]
    assert "set_rollback(True)" in entry["error"]


@pytest.mark.django_db(transaction=True)
def test_atomic__enqueued_job__exists_only_after_the_commit(
    worker_for: Callable[[Registry], Any], gate: threading.Event
) -> None:
    seen_inside: list[bool] = []

    def handler(context: JobContext) -> None:
        child = Job.objects.enqueue("follow_up", {"parent": context.job_id}, queue="elsewhere")
        seen_inside.append(child.id is not None)
        gate.wait(30)

    worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    wait_until(lambda: seen_inside, what="the handler to enqueue its follow-up")
    # Enqueued inside the handler's open transaction: no other connection sees it yet.
    assert not Job.objects.filter(kind="follow_up").exists()
    gate.set()
    wait_for_row(job_id, state="completed")
    assert list(Job.objects.filter(kind="follow_up").values_list("args", "state")) == [
        ({"parent": job_id}, "available")
    ]


@pytest.mark.django_db(transaction=True)
def test_atomic__lease_lost_to_a_rescue__no_writes_no_follow_up(
    worker_for: Callable[[Registry], Any], gate: threading.Event
) -> None:
    reached: list[int] = []

    def handler(context: JobContext) -> None:
        _write(context)
        Job.objects.enqueue("follow_up", {"attempt": context.attempt}, queue="elsewhere")
        reached.append(context.attempt)
        if context.attempt == 1:
            gate.wait(30)

    worker = worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    wait_until(lambda: reached, what="the first attempt to write")
    assert rescue_running() == [job_id]
    gate.set()
    row = wait_for_row(job_id, state="completed")
    assert row.attempt == 2
    # Only the attempt that completed left its writes and its follow-up.
    assert _executions(job_id) == [(2, row.run_lease)]
    assert list(Job.objects.filter(kind="follow_up").values_list("args", flat=True)) == [{"attempt": 2}]
    wait_until(lambda: worker.completer.lost == 1, what="the first attempt counted as lost")
    # The second attempt's count moves once its commit has returned to the worker, a moment after
    # its row reads completed (flake hunt: read as 0 on a loaded machine).
    wait_until(lambda: worker.completer.written == 1, what="the second attempt counted as written")


@pytest.mark.django_db(transaction=True)
def test_atomic__cancelled_while_running__no_writes(
    worker_for: Callable[[Registry], Any], gate: threading.Event
) -> None:
    reached: list[int] = []

    def handler(context: JobContext) -> None:
        _write(context)
        reached.append(context.job_id)
        gate.wait(30)

    worker = worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    wait_until(lambda: reached, what="the handler to write")
    assert cancel_jobs([job_id]) == 1
    gate.set()
    wait_until(lambda: worker.completer.discarded == 1, what="the attempt's refused completion")
    assert Job.objects.get(pk=job_id).state == "cancelled"
    assert _executions(job_id) == []


@pytest.mark.django_db(transaction=True)
def test_atomic__workflow_step__release_follows_the_commit(
    worker_for: Callable[[Registry], Any], gate: threading.Event
) -> None:
    reached: list[int] = []

    def first(context: JobContext) -> None:
        _write(context)
        reached.append(context.job_id)
        gate.wait(30)

    def second(context: JobContext) -> None:
        _write(context)

    worker_for(_registry(("first", first), ("second", second)))
    wf = Workflow("atomic-release")
    a = wf.add("first", {}, queue=QUEUE)
    b = wf.add("second", {}, queue=QUEUE, after=[a])
    wf.enqueue()
    assert a.id is not None and b.id is not None
    wait_until(lambda: reached, what="the first step to run")
    assert Job.objects.get(pk=b.id).state == "waiting"
    gate.set()
    wait_for_row(b.id, state="completed")
    assert [job_id for job_id in (a.id, b.id) if len(_executions(job_id)) == 1] == [a.id, b.id]


@pytest.mark.django_db(transaction=True)
def test_atomic__on_commit_callback_raises__job_stays_completed_once(
    worker_for: Callable[[Registry], Any], caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    def handler(context: JobContext) -> None:
        _write(context)
        ran.append(context.attempt)

        def after() -> None:
            raise RuntimeError("the receipt mailer is down")

        transaction.on_commit(after)

    worker = worker_for(_registry(("charge", handler)))
    job_id = Job.objects.enqueue("charge", {}, queue=QUEUE).id
    row = wait_for_row(job_id, state="completed")
    assert _executions(job_id) == [(1, row.run_lease)]
    assert (row.attempt, row.errors) == (1, [])
    wait_until(lambda: worker.completer.written == 1, what="the attempt answered as written")
    assert (ran, worker.completer.lost, worker.completer.discarded) == ([1], 0, 0)
    assert "on_commit callback of an atomic handler raised after its transaction committed" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_atomic__workflow_step_loses_its_lease__dependent_waits_then_runs_once(
    worker_for: Callable[[Registry], Any], gate: threading.Event
) -> None:
    reached: list[int] = []

    def first(context: JobContext) -> None:
        _write(context)
        reached.append(context.attempt)
        if context.attempt == 1:
            gate.wait(30)

    def second(context: JobContext) -> None:
        _write(context)

    worker_for(_registry(("first", first), ("second", second)))
    wf = Workflow("atomic-lost-release")
    a = wf.add("first", {}, queue=QUEUE)
    b = wf.add("second", {}, queue=QUEUE, after=[a])
    wf.enqueue()
    assert a.id is not None and b.id is not None
    wait_until(lambda: reached, what="the first step's first attempt")
    assert rescue_running() == [a.id]
    gate.set()
    done = wait_for_row(b.id, state="completed")
    first_row = Job.objects.get(pk=a.id)
    assert (first_row.state, first_row.attempt) == ("completed", 2)
    # The lost attempt released nothing and wrote nothing; the dependent ran once, after attempt 2.
    assert _executions(a.id) == [(2, first_row.run_lease)]
    assert _executions(b.id) == [(1, done.run_lease)]


@pytest.mark.django_db(transaction=True)
def test_durable__rescued_attempt_completes_a_step_before_the_next_reaches_it__not_run_again(
    worker_for: Callable[[Registry], Any], gate: threading.Event
) -> None:
    """A rescue (a stale heartbeat, a passed deadline) leaves the first attempt's thread running:
    it completes and records s2 while the second attempt is still before s2. The second then
    reaches a step whose record is stored, and must return it rather than run it again."""
    from awa_django.models import JobStep

    in_s2: list[int] = []
    before_s2 = threading.Event()
    ran_s2: list[int] = []

    def handler(context: JobContext) -> Any:
        context.step("s1", lambda: context.attempt)
        if context.attempt == 2:
            before_s2.wait(30)

        def second() -> int:
            in_s2.append(context.attempt)
            if context.attempt == 1:
                gate.wait(30)
            ran_s2.append(context.attempt)
            return context.attempt

        return context.step("s2", second)

    worker_for(_registry(("durable_overlap", handler), atomic=False))
    job_id = Job.objects.enqueue("durable_overlap", {}, queue=QUEUE).id
    wait_until(lambda: in_s2, what="the first attempt inside s2")
    assert rescue_running() == [job_id]
    wait_until(lambda: Job.objects.get(pk=job_id).attempt == 2, what="the second attempt claimed")
    gate.set()  # the first attempt finishes s2 and records it
    wait_until(lambda: JobStep.objects.filter(job_id=job_id, name="s2").exists(), what="s2 recorded")
    before_s2.set()
    row = wait_for_row(job_id, state="completed")
    assert ran_s2 == [1], ran_s2
    assert row.result == 1
