"""Tasks run by a real worker: results, failures and retries under the job rules, run_after,
priority order, async tasks, the context, and the started/finished signals."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from awa_django.backends import AwaBackend
from awa_django.models import Job
from awa_django.worker import QueueConfig
from testproject.demo.tasks import add
from tests.harness import make_config, running_worker, spawn_worker, wait_until, worker_env
from tests.tasks.framework import TaskResultStatus, task_enqueued, task_finished, task_started
from tests.tasks.tasks import BoomError, add_async, boom, flaky, label, unstorable
from tests.worker.support import bring_forward, wait_for_row

BACKEND = "awa_django.backends.AwaBackend"


def tasks_settings(**options: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": options}}


def finished(task: Any, result_id: str, timeout: float = 30.0) -> Any:
    """The task's result once it is SUCCESSFUL or FAILED."""

    def check() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return wait_until(check, timeout=timeout, what=f"task result {result_id} to finish")


class Signals:
    """Every task signal sent, as (name, sender, task_result), from whichever thread sent it, and
    the result's status when it was sent (immediate mode updates the result it returns, which is
    the one task_enqueued carries, as Django's ImmediateBackend does)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[tuple[str, type, Any]] = []
        self.statuses: list[str] = []
        self.receivers = {
            signal: self._receiver(name)
            for name, signal in [("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)]
        }

    def _receiver(self, name: str) -> Any:
        def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
            with self.lock:
                self.sent.append((name, sender, task_result))
                self.statuses.append(str(task_result.status))

        return receive

    def of(self, result_id: str) -> list[tuple[str, str]]:
        with self.lock:
            return [
                (name, status)
                for (name, _, result), status in zip(self.sent, self.statuses, strict=True)
                if result.id == result_id
            ]

    def results(self, result_id: str, name: str) -> list[Any]:
        with self.lock:
            return [result for n, _, result in self.sent if result.id == result_id and n == name]


@pytest.fixture
def signals() -> Iterator[Signals]:
    recorder = Signals()
    for signal, receiver in recorder.receivers.items():
        signal.connect(receiver, weak=False)
    try:
        yield recorder
    finally:
        for signal, receiver in recorder.receivers.items():
            signal.disconnect(receiver)


@pytest.mark.django_db(transaction=True)
def test_add__runs_on_the_worker_and_is_successful_with_its_return_value() -> None:
    result = add.enqueue(2, 3)
    with running_worker(make_config(["default"])):
        done = finished(add, result.id)

    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.attempts == 1
    assert done.errors == []
    job = Job.objects.get(pk=int(result.id))
    assert job.state == "completed" and job.result == 5
    assert done.enqueued_at == job.created_at
    assert done.started_at == done.last_attempted_at == job.attempted_at
    assert done.finished_at == job.finalized_at
    assert done.enqueued_at <= done.started_at <= done.finished_at


@pytest.mark.django_db(transaction=True)
def test_failing_task__fails_after_max_attempts_with_class_path_and_traceback() -> None:
    with override_settings(TASKS=tasks_settings(MAX_ATTEMPTS=2)):
        result = boom.enqueue("it broke")
        with running_worker(make_config(["default"])):
            wait_for_row(int(result.id), state="retryable", attempt=1)
            assert boom.get_result(result.id).status == TaskResultStatus.READY  # a retry is due
            bring_forward(int(result.id))
            done = finished(boom, result.id)

        assert done.status == TaskResultStatus.FAILED
        assert done.attempts == 2
        assert [error.exception_class_path for error in done.errors] == ["tests.tasks.tasks.BoomError"] * 2
        assert done.errors[0].exception_class is BoomError
        assert "BoomError: it broke" in done.errors[-1].traceback
        assert "raise BoomError(message)" in done.errors[-1].traceback
        with pytest.raises(ValueError, match="failed"):
            done.return_value  # noqa: B018
    job = Job.objects.get(pk=int(result.id))
    assert (job.state, job.attempt, job.max_attempts, len(job.errors)) == ("failed", 2, 2, 2)


@pytest.mark.django_db(transaction=True)
def test_takes_context__receives_the_attempt_number_and_the_current_result() -> None:
    with override_settings(TASKS=tasks_settings(MAX_ATTEMPTS=2)):
        result = flaky.enqueue("v")
        with running_worker(make_config(["default"])):
            wait_for_row(int(result.id), state="retryable", attempt=1)
            bring_forward(int(result.id))
            done = finished(flaky, result.id)

    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.attempts == 2
    assert done.return_value == {
        "value": "v",
        "attempt": 2,
        "id": result.id,
        "status": "RUNNING",
        "errors": ["builtins.ValueError"],
    }
    assert [error.exception_class for error in done.errors] == [ValueError]


@pytest.mark.django_db(transaction=True)
def test_run_after__is_honoured() -> None:
    run_after = timezone.now() + timedelta(seconds=2)
    result = add.using(run_after=run_after).enqueue(1, 1)
    assert Job.objects.get(pk=int(result.id)).state == "scheduled"

    with running_worker(make_config(["default"])):
        assert add.get_result(result.id).status == TaskResultStatus.READY
        done = finished(add, result.id)

    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.started_at >= run_after
    assert done.task.run_after == run_after


@pytest.mark.django_db(transaction=True)
def test_priority__higher_framework_priority_runs_first_on_a_single_slot_queue() -> None:
    enqueued = [
        label.using(priority=-100).enqueue("lowest"),
        label.using(priority=-10).enqueue("low"),
        label.enqueue("default"),
        label.using(priority=100).enqueue("highest"),
        label.using(priority=5).enqueue("high"),
    ]
    config = make_config({"default": QueueConfig("default", max_workers=1)})
    with running_worker(config):
        done = [finished(label, result.id) for result in enqueued]

    assert all(result.status == TaskResultStatus.SUCCESSFUL for result in done)
    by_start = sorted(done, key=lambda result: result.started_at)
    # 1 (highest, high in enqueue order), 2 (default), 3 (low), 4 (lowest)
    assert [result.args[0] for result in by_start] == ["highest", "high", "default", "low", "lowest"]
    assert [result.return_value for result in by_start] == [result.args[0] for result in by_start]
    assert [result.task.priority for result in by_start] == [100, 5, 0, -10, -100]


@pytest.mark.django_db(transaction=True)
def test_async_task__runs_on_the_worker() -> None:
    result = add_async.enqueue(4, 5)
    with running_worker(make_config(["default"])):
        done = finished(add_async, result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 9


@pytest.mark.django_db(transaction=True)
def test_return_value_json_cannot_hold__fails_at_once_with_a_clear_error() -> None:
    result = unstorable.enqueue()
    with running_worker(make_config(["default"])):
        done = finished(unstorable, result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1
    assert done.errors[0].exception_class_path == "builtins.TypeError"  # as the framework's backends fail it
    assert "cannot be stored as JSON" in done.errors[0].traceback


@pytest.mark.django_db(transaction=True)
def test_args_that_do_not_fit_the_task__fail_at_once() -> None:
    result = add.enqueue(1)  # type: ignore[call-arg]  # one argument short, on purpose
    with running_worker(make_config(["default"])):
        done = finished(add, result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1
    assert "do not match task testproject.demo.tasks.add" in done.errors[0].traceback


@pytest.mark.django_db(transaction=True)
def test_task_whose_module_fails_to_import__fails_with_that_error() -> None:
    job = Job.objects.enqueue("tests.tasks.unimportable.anything", {"args": [], "kwargs": {}}, max_attempts=1)
    with running_worker(make_config(["default"])):
        failed = wait_for_row(job.pk, state="failed")
    assert failed.errors[0]["error"] == "RuntimeError: tests.tasks.unimportable fails to import on purpose"


@pytest.mark.django_db(transaction=True)
def test_signals__enqueued_started_finished_fire_in_order(signals: Signals) -> None:
    with override_settings(TASKS=tasks_settings(MAX_ATTEMPTS=1)):
        ok = add.enqueue(20, 22)
        failing = boom.enqueue("no")
        coroutine = add_async.enqueue(1, 2)
        with running_worker(make_config(["default"])):
            for task, result in [(add, ok), (boom, failing), (add_async, coroutine)]:
                finished(task, result.id)  # type: ignore[attr-defined]

    assert signals.of(ok.id) == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    assert signals.of(failing.id) == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "FAILED")]
    assert signals.of(coroutine.id) == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    assert {sender for _, sender, _ in signals.sent} == {AwaBackend}

    [started] = signals.results(ok.id, "started")
    assert started.attempts == 1 and started.started_at is not None
    [done] = signals.results(ok.id, "finished")
    assert done.return_value == 42 and done.finished_at is not None
    [failure] = signals.results(failing.id, "finished")
    assert [error.exception_class_path for error in failure.errors] == ["tests.tasks.tasks.BoomError"]
    assert "BoomError: no" in failure.errors[0].traceback
    [coroutine_done] = signals.results(coroutine.id, "finished")
    assert coroutine_done.return_value == 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_awa_worker_command__runs_tasks_it_was_never_told_about(tmp_path: Any) -> None:
    """The command's process imports no task module: the backend is loaded at startup and the
    worker finds the task by its module path."""
    result = add.enqueue(40, 2)
    log = tmp_path / "worker.log"
    process = spawn_worker("-q", "default", env=worker_env(), log=log)
    try:
        done = finished(add, result.id, timeout=60.0)
    finally:
        process.kill()
        process.wait(30)
    assert done.status == TaskResultStatus.SUCCESSFUL, log.read_text()
    assert done.return_value == 42
