"""The Tasks framework's contract, in each way a task runs: immediate mode (at the enqueue's
commit), ``run_jobs`` (in the test's transaction) and a real worker.

What is checked here is what a framework backend promises: every started attempt finishes
(``SystemExit`` and ``KeyboardInterrupt`` included), the signals come in the framework's order,
the framework's error types, a result from an immediate enqueue that says how the run ended (as
Django's ImmediateBackend's does), a KeyboardInterrupt let through in immediate mode, priority
order between any two priorities, and one attempt unless the backend's OPTIONS say more.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.test import override_settings
from django.utils.module_loading import import_string
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.backends import PRIORITY_STEP, AwaBackend, head_start, job_priority
from awa_django.exceptions import InvalidJobError
from awa_django.models import Job
from awa_django.registry import TASKS_BACKEND_PATH, Registry
from awa_django.states import JobState
from awa_django.testing import run_jobs
from awa_django.worker import QueueConfig
from testproject.demo.tasks import add
from tests.harness import make_config, running_worker
from tests.tasks.framework import TaskResultStatus
from tests.tasks.tasks import (
    add_async,
    boom,
    calls_exit,
    echo,
    enqueues_label,
    exits,
    exits_async,
    interrupted,
    label,
    returns_nul,
    undecodable,
    unstorable,
)
from tests.tasks.test_worker import Signals, finished, tasks_settings
from tests.worker.support import wait_for_row

IMMEDIATE = {"EXECUTION": "immediate"}
FRAMEWORK_PRIORITIES = st.integers(min_value=-100, max_value=100)


@pytest.fixture
def signals() -> Iterator[Signals]:
    from tests.tasks.framework import task_enqueued, task_finished, task_started

    recorder = Signals()
    pairs = list(zip([task_enqueued, task_started, task_finished], recorder.receivers.values(), strict=True))
    for signal, receiver in pairs:
        signal.connect(receiver, weak=False)
    try:
        yield recorder
    finally:
        for signal, receiver in pairs:
            signal.disconnect(receiver)


def job_of(result: Any) -> Job:
    return Job.objects.get(pk=int(result.id))


# --- every attempt finishes: SystemExit, KeyboardInterrupt, exit() ---------------------------

EXITING = [
    pytest.param(exits, (7,), "builtins.SystemExit", id="SystemExit"),
    pytest.param(calls_exit, (), "builtins.SystemExit", id="exit()"),
    pytest.param(interrupted, (), "builtins.KeyboardInterrupt", id="KeyboardInterrupt"),
    pytest.param(exits_async, (), "builtins.SystemExit", id="async-SystemExit"),
]


def assert_finished_failed(signals: Signals, result: Any, class_path: str, *, committed: bool = True) -> None:
    sent = [("started", "RUNNING"), ("finished", "FAILED")]
    if committed:  # task_enqueued is sent at commit: a django_db test's transaction never commits
        sent.insert(0, ("enqueued", "READY"))
    assert signals.of(result.id) == sent
    [done] = signals.results(result.id, "finished")
    assert [error.exception_class_path for error in done.errors] == [class_path]
    job = job_of(result)
    assert (job.state, job.attempt) == (JobState.FAILED, 1)
    assert job.errors[0]["exception"] == class_path
    stored = result.task.get_result(result.id)
    assert stored.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in stored.errors] == [class_path]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("task", "args", "class_path"), [p for p in EXITING if p.id != "KeyboardInterrupt"])
def test_exiting_task__immediate__finishes_failed_and_the_caller_runs_on(
    signals: Signals, task: Any, args: tuple[Any, ...], class_path: str
) -> None:
    with override_settings(AWA=IMMEDIATE):
        result = task.enqueue(*args)
    assert result.status == TaskResultStatus.FAILED
    assert_finished_failed(signals, result, class_path)


@pytest.mark.django_db
@pytest.mark.parametrize(("task", "args", "class_path"), EXITING)
def test_exiting_task__run_jobs__finishes_failed(
    signals: Signals, task: Any, args: tuple[Any, ...], class_path: str
) -> None:
    result = task.enqueue(*args)
    [run] = run_jobs(raise_on_failure=False)
    assert run.state == JobState.FAILED
    assert_finished_failed(signals, result, class_path, committed=False)


@pytest.mark.django_db(transaction=True)
def test_exiting_tasks__worker__finish_failed_and_the_worker_runs_on(signals: Signals) -> None:
    results = [
        (exits.enqueue(7), "builtins.SystemExit"),
        (calls_exit.enqueue(), "builtins.SystemExit"),
        (interrupted.enqueue(), "builtins.KeyboardInterrupt"),
        (exits_async.enqueue(), "builtins.SystemExit"),
    ]
    after = add.enqueue(1, 2)
    with running_worker(make_config(["default"])) as worker:
        for result, _ in results:
            finished(result.task, result.id)  # type: ignore[attr-defined]
        assert finished(add, after.id).return_value == 3  # still running jobs
        assert not worker.stopping
    for result, class_path in results:
        assert_finished_failed(signals, result, class_path)


# --- KeyboardInterrupt in immediate mode: let through, as Django's ImmediateBackend does -------


@pytest.mark.django_db(transaction=True)
def test_keyboard_interrupt__immediate__is_raised_from_enqueue_and_the_attempt_recorded(signals: Signals) -> None:
    with override_settings(AWA=IMMEDIATE), pytest.raises(KeyboardInterrupt, match="interrupted in immediate mode"):
        interrupted.enqueue()
    job = Job.objects.get(kind=interrupted.module_path)
    assert (job.state, job.attempt) == (JobState.FAILED, 1)
    assert [error["exception"] for error in job.errors] == ["builtins.KeyboardInterrupt"]
    assert signals.of(str(job.pk)) == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "FAILED")]
    stored = interrupted.get_result(str(job.pk))
    assert stored.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in stored.errors] == ["builtins.KeyboardInterrupt"]


@pytest.mark.django_db(transaction=True)
def test_keyboard_interrupt__immediate__is_raised_at_commit_after_the_held_result_learns_of_it() -> None:
    with override_settings(AWA=IMMEDIATE), pytest.raises(KeyboardInterrupt, match=r"\(job \d+\)"):
        with transaction.atomic():
            result = interrupted.enqueue()
            later = label.enqueue("after the interrupt")
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    assert [error.exception_class_path for error in result.errors] == ["builtins.KeyboardInterrupt"]
    assert job_of(result).state == JobState.FAILED
    # Committed before the interrupt, not run after it: a worker (or run_jobs) runs it.
    assert (job_of(later).state, job_of(later).attempt) == (JobState.AVAILABLE, 0)


@pytest.mark.django_db(transaction=True)
def test_keyboard_interrupt__immediate__with_attempts_left__raised_and_the_job_left_to_retry() -> None:
    with override_settings(AWA=IMMEDIATE, TASKS=tasks_settings(MAX_ATTEMPTS=3)):
        with pytest.raises(KeyboardInterrupt):
            interrupted.enqueue()
    job = Job.objects.get(kind=interrupted.module_path)
    assert (job.state, job.attempt) == (JobState.RETRYABLE, 1)
    assert job.errors[0]["exception"] == "builtins.KeyboardInterrupt"


# --- signal order in immediate mode -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("task", [add, add_async], ids=["sync", "async"])
def test_immediate__signals_come_enqueued_started_finished(signals: Signals, task: Any) -> None:
    with override_settings(AWA=IMMEDIATE):
        outside = task.enqueue(1, 2)
        with transaction.atomic():
            inside = task.enqueue(3, 4)
            assert signals.of(inside.id) == []  # nothing until the commit: a rollback would undo it
        failing = boom.enqueue("no")
    order = [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    assert signals.of(outside.id) == order
    assert signals.of(inside.id) == order
    assert signals.of(failing.id) == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "FAILED")]


@pytest.mark.django_db(transaction=True)
def test_immediate__signals_in_order_across_several_enqueues_in_one_transaction(signals: Signals) -> None:
    with override_settings(AWA=IMMEDIATE), transaction.atomic():
        first = label.enqueue("first")
        second = label.enqueue("second")
    names = [(name, result.id) for name, _, result in signals.sent]
    # Each task's enqueued comes before its own start; both are enqueued before either runs.
    assert names.index(("enqueued", first.id)) < names.index(("started", first.id))
    assert names.index(("enqueued", second.id)) < names.index(("started", second.id))
    assert names.index(("started", first.id)) < names.index(("finished", first.id))
    assert names.index(("started", second.id)) < names.index(("finished", second.id))


@pytest.mark.django_db(transaction=True)
def test_immediate__rolled_back_enqueue_sends_nothing_and_runs_nothing(signals: Signals) -> None:
    with override_settings(AWA=IMMEDIATE):
        with pytest.raises(RuntimeError, match="undo"), transaction.atomic():
            result = add.enqueue(1, 1)
            raise RuntimeError("undo")
        assert signals.of(result.id) == []
        assert not Job.objects.exists()
    assert result.status == TaskResultStatus.READY and result.attempts == 0
    assert result.started_at is None and result.finished_at is None


# --- result freshness in immediate mode ---------------------------------------------------------


def assert_as_stored(result: Any) -> None:
    """``result`` says what the job row says, with no refresh(): the fields refresh() reloads."""
    stored = result.task.get_result(result.id)
    assert result.status == stored.status and result.is_finished
    assert result.enqueued_at == stored.enqueued_at
    assert result.started_at == stored.started_at is not None
    assert result.last_attempted_at == stored.last_attempted_at == result.started_at
    assert result.finished_at == stored.finished_at is not None
    assert result.worker_ids == stored.worker_ids == ["attempt-1"]
    assert result.errors == stored.errors


@pytest.mark.django_db(transaction=True)
def test_immediate__enqueue_outside_a_transaction_returns_the_finished_result() -> None:
    with override_settings(AWA=IMMEDIATE):
        done = add.enqueue(2, 3)
        failed = boom.enqueue("boom")
        coroutine = add_async.enqueue(5, 6)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.is_finished
    assert done.return_value == 5 and done.attempts == 1
    assert done.started_at is not None and done.finished_at is not None
    assert done.task.func is add.func
    assert coroutine.status == TaskResultStatus.SUCCESSFUL and coroutine.return_value == 11  # type: ignore[comparison-overlap]
    assert failed.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in failed.errors] == ["tests.tasks.tasks.BoomError"]
    for result in (done, failed, coroutine):
        assert_as_stored(result)


@pytest.mark.django_db(transaction=True)
def test_immediate__enqueue_inside_a_transaction_is_ready_then_the_held_result_learns_the_run_at_commit() -> None:
    with override_settings(AWA=IMMEDIATE):
        with transaction.atomic():
            result = add.enqueue(2, 3)
            failed = boom.enqueue("at commit")
            assert (result.status, failed.status) == (TaskResultStatus.READY, TaskResultStatus.READY)
            assert not result.worker_ids and result.started_at is None
        assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
        assert failed.status == TaskResultStatus.FAILED
        assert [error.exception_class_path for error in failed.errors] == ["tests.tasks.tasks.BoomError"]
    assert_as_stored(result)
    assert_as_stored(failed)


@pytest.mark.django_db(transaction=True)
def test_immediate__a_task_enqueued_by_a_running_task_runs_after_it_and_its_result_says_ready() -> None:
    with override_settings(AWA=IMMEDIATE):
        outer = enqueues_label.enqueue("inner")
    assert outer.status == TaskResultStatus.SUCCESSFUL
    assert outer.return_value["status"] == "READY"  # the inner task had not run yet
    inner = label.get_result(outer.return_value["id"])
    assert inner.status == TaskResultStatus.SUCCESSFUL and inner.return_value == "inner"


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_immediate__aenqueue_returns_the_finished_result_too() -> None:
    try:
        with override_settings(AWA=IMMEDIATE):
            result = await add_async.aenqueue(4, 5)
        assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 9  # type: ignore[comparison-overlap]
    finally:
        await sync_to_async(connections.close_all)()  # aenqueue ran in asgiref's thread, on its own connection


@pytest.mark.django_db(transaction=True)
def test_immediate__the_result_task_enqueued_carries_is_the_one_returned(signals: Signals) -> None:
    """As in Django's ImmediateBackend: one object, updated by the run."""
    with override_settings(AWA=IMMEDIATE):
        result = add.enqueue(1, 2)
    [sent] = signals.results(result.id, "enqueued")
    assert sent is result and sent.status == TaskResultStatus.SUCCESSFUL


# --- error types ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((object(),), {}), ((), {"when": {1, 2}}), (([1, {"deep": object()}],), {})],
    ids=["object", "set-kwarg", "nested"],
)
def test_enqueue__argument_json_has_no_type_for__is_TypeError(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="cannot be stored as JSON") as raised:
        echo.enqueue(*args, **kwargs)
    assert not isinstance(raised.value, InvalidJobError)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_enqueue__bytes_that_are_not_utf8__are_a_ValueError_as_in_the_framework() -> None:
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        echo.enqueue(b"\xff")
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("task", "class_path"),
    [(unstorable, "builtins.TypeError"), (undecodable, "builtins.ValueError")],
)
def test_result_json_cannot_hold__fails_with_the_frameworks_error_type(task: Any, class_path: str) -> None:
    result = task.enqueue()
    [run] = run_jobs(raise_on_failure=False)
    assert run.state == JobState.FAILED
    stored = task.get_result(result.id)
    assert stored.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in stored.errors] == [class_path]
    assert "cannot be stored as JSON" in stored.errors[0].traceback
    assert "return None or JSON-serialisable data" in stored.errors[0].traceback


@pytest.mark.django_db
def test_result_jsonb_cannot_hold__the_finished_signal_says_failed_as_the_row_does(signals: Signals) -> None:
    # A NUL in the return value: task_finished said SUCCESSFUL (with that value) while the job
    # ended FAILED, its error an AwaError the task never raised.
    result = returns_nul.enqueue()
    [run] = run_jobs(raise_on_failure=False)
    assert run.state == JobState.FAILED
    assert_finished_failed(signals, result, "builtins.ValueError", committed=False)
    assert "NUL character" in result.task.get_result(result.id).errors[0].traceback


@pytest.mark.django_db(transaction=True)
def test_result_json_cannot_hold__immediate__TypeError_too() -> None:
    with override_settings(AWA=IMMEDIATE):
        result = unstorable.enqueue()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


# --- a task whose module cannot be imported ------------------------------------------------------


def task_job(kind: str) -> Job:
    """A task's job as the backend writes it, for a path the worker cannot import."""
    metadata = {"task": {"backend": "default", "priority": 0, "run_after": None}}
    return Job.objects.enqueue(kind, {"args": [], "kwargs": {}}, metadata=metadata, max_attempts=1)


MISSING = [
    pytest.param("tests.tasks.gone.send", "'tests.tasks.gone'", "no module named 'tests.tasks.gone'", id="module"),
    pytest.param("tests.gone.tasks.send", "'tests.gone.tasks'", "no module named 'tests.gone'", id="package"),
    pytest.param("tests.tasks.tasks.renamed", "'tests.tasks.tasks'", "has no attribute 'renamed'", id="attribute"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "module", "reason"), MISSING)
def test_missing_task_module__run_jobs__fails_with_ImportError_naming_the_module(
    kind: str, module: str, reason: str
) -> None:
    job = task_job(kind)
    [run] = run_jobs(raise_on_failure=False)
    assert run.state == JobState.FAILED
    error = Job.objects.get(pk=job.pk).errors[0]
    assert error["exception"] == "builtins.ImportError"
    assert error["error"].startswith(f"ImportError: task {kind!r} cannot be imported from module {module}")
    assert reason in error["error"]
    assert "@job" not in error["error"]


@pytest.mark.django_db(transaction=True)
def test_missing_task_module__worker__fails_with_ImportError_naming_the_module() -> None:
    job = task_job("tests.tasks.gone.send")
    with running_worker(make_config(["default"])):
        failed = wait_for_row(job.pk, state="failed")
    assert failed.errors[0]["error"].startswith(
        "ImportError: task 'tests.tasks.gone.send' cannot be imported from module 'tests.tasks.gone'"
    )


@pytest.mark.django_db(transaction=True)
def test_unknown_task__a_worker_started_without_TASKS__fails_it_naming_TASKS_and_a_restart() -> None:
    """A worker whose registry has no Tasks backend (started before TASKS was set) does not know
    the task: the error on the job says to configure TASKS and restart, not to write a @job."""
    result = add.enqueue(1, 2)
    with running_worker(make_config(["default"]), registry=Registry()):
        failed = wait_for_row(int(result.id), state="failed")
    error = failed.errors[0]["error"]
    assert error.startswith(f"no handler registered for kind {add.module_path!r}; it is a Tasks framework task")
    assert import_string(TASKS_BACKEND_PATH) is AwaBackend  # the path the hint names leads to the backend
    assert f"configure TASKS['default'] with 'BACKEND': '{TASKS_BACKEND_PATH}'" in error
    assert error.endswith("then restart the worker")
    assert "@job" not in error and "jobs.py" not in error


@pytest.mark.django_db
def test_missing_top_level_package__is_an_unknown_kind_as_for_any_job() -> None:
    """``emails.send_welcome`` with no app ``emails``: a job kind nothing registered, not a path."""
    job = task_job("gone_package.tasks.send")
    [run] = run_jobs(raise_on_failure=False)
    assert run.state == JobState.FAILED
    error = Job.objects.get(pk=job.pk).errors[0]["error"]
    assert error.startswith("no handler registered for kind 'gone_package.tasks.send'")
    assert "deploy the code that defines it" in error and "@job" not in error  # TASKS is configured here


@pytest.mark.django_db
def test_missing_module__a_plain_dotted_job__is_still_an_unknown_kind() -> None:
    job = Job.objects.enqueue("tests.tasks.gone.send", {"anything": 1})
    [run] = run_jobs(raise_on_failure=False)
    assert run.state == JobState.FAILED
    error = Job.objects.get(pk=job.pk).errors[0]["error"]
    assert "no handler registered for kind 'tests.tasks.gone.send'" in error
    assert "@job('tests.tasks.gone.send')" in error


@pytest.mark.django_db
def test_missing_module__a_plain_dotted_job__is_still_warned_of_at_enqueue(caplog: pytest.LogCaptureFixture) -> None:
    from awa_django.notices import notices

    notices.reset()
    caplog.set_level(logging.WARNING, logger="awa_django")
    try:
        Job.objects.enqueue("tests.tasks.gone.typo")
        label.enqueue("known")  # a task: its kind resolves, nothing to warn of
    finally:
        notices.reset()
    warned = [r.getMessage() for r in caplog.records if "no registered handler" in r.getMessage()]
    assert len(warned) == 1 and "kind=tests.tasks.gone.typo" in warned[0]


# --- priority order --------------------------------------------------------------------------


@given(st.lists(FRAMEWORK_PRIORITIES, min_size=2, max_size=2, unique=True))
def test_head_start__orders_any_two_priorities_like_the_framework(pair: list[int]) -> None:
    high, low = max(pair), min(pair)
    # The claim's order for two tasks enqueued together: lane, then run_at (earlier first).
    assert (job_priority(high), -head_start(high)) < (job_priority(low), -head_start(low))


def test_head_start__stays_inside_the_look_behind_window() -> None:
    from awa_django.worker.lanes import LOOK_BEHIND_WINDOW

    largest = max(head_start(p) for p in range(-100, 101))
    assert largest == 99 * PRIORITY_STEP
    assert largest.total_seconds() < LOOK_BEHIND_WINDOW
    assert head_start(0) == head_start(1) == head_start(-50) == head_start(-100) == PRIORITY_STEP * 0


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=st.lists(FRAMEWORK_PRIORITIES, min_size=2, max_size=2, unique=True), reverse=st.booleans())
def test_priority__any_two_priorities_run_in_the_frameworks_order(pair: list[int], reverse: bool) -> None:
    """Two tasks enqueued together, in either order, run higher priority first (the claim's own
    order: run_jobs claims with claim_due_jobs, ordered by priority, run_at, id as claim_jobs)."""
    order = sorted(pair, reverse=not reverse)  # enqueue the higher one first, or last
    with transaction.atomic():
        ids = {label.using(priority=p).enqueue(str(p)).id: p for p in order}
        report = run_jobs()
        ran = [ids[str(run.job_id)] for run in report]
        transaction.set_rollback(True)  # the next example starts from an empty table
    assert ran == sorted(pair, reverse=True)


@pytest.mark.django_db(transaction=True)
def test_priority__a_real_worker_runs_every_priority_in_order_on_one_slot() -> None:
    priorities = sorted({*range(-100, 101, 7), 100, 99, 1, 0, -1, -50, -51})
    random.Random(27).shuffle(priorities)
    with transaction.atomic():  # enqueued together: the order is exact
        results = {p: label.using(priority=p).enqueue(str(p)) for p in priorities}
    config = make_config({"default": QueueConfig("default", max_workers=1)})
    with running_worker(config):
        done = {p: finished(label, result.id) for p, result in results.items()}
    by_start = sorted(done, key=lambda p: (done[p].started_at, -p))
    assert [done[p].started_at for p in by_start] == sorted(done[p].started_at for p in by_start)
    assert len({done[p].started_at for p in done}) == len(done)  # one slot: one claim at a time
    assert by_start == sorted(priorities, reverse=True)


@pytest.mark.django_db
def test_priority__run_after_gets_no_head_start() -> None:
    from django.utils import timezone

    when = timezone.now().replace(microsecond=0) + PRIORITY_STEP * 1000
    result = label.using(priority=90, run_after=when).enqueue("later")
    assert job_of(result).run_at == when  # never before run_after


# --- attempts --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_max_attempts__a_failing_task_fails_after_one_attempt_by_default(signals: Signals) -> None:
    result = boom.enqueue("once")
    with running_worker(make_config(["default"])):
        done = finished(boom, result.id)
    assert done.status == TaskResultStatus.FAILED and done.attempts == 1
    job = job_of(result)
    assert (job.state, job.attempt, job.max_attempts) == (JobState.FAILED, 1, 1)
    assert signals.of(result.id)[-1] == ("finished", "FAILED")


@pytest.mark.django_db
def test_max_attempts__the_backend_options_give_more() -> None:
    with override_settings(TASKS=tasks_settings(MAX_ATTEMPTS=4)):
        result = boom.enqueue("again")
        report = run_jobs(raise_on_failure=False)
    assert [run.state for run in report] == [JobState.RETRYABLE]
    assert (job_of(result).attempt, job_of(result).max_attempts) == (1, 4)
