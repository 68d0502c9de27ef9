"""The backend's enqueue side: how a task becomes a job row, what the framework's validation
refuses, transactions, ``task_enqueued`` and reading results back. No worker runs here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from awa_django.backends import AwaBackend, head_start, job_priority
from awa_django.models import Job
from testproject.demo.tasks import add
from tests.tasks.framework import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
)
from tests.tasks.tasks import add_async, echo, flaky, label

BACKEND = "awa_django.backends.AwaBackend"


@pytest.fixture
def enqueued() -> Iterator[list[Any]]:
    """The task results task_enqueued was sent with, in order."""
    seen: list[Any] = []

    def receiver(sender: type, task_result: Any, **kwargs: Any) -> None:
        seen.append((sender, task_result))

    task_enqueued.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        task_enqueued.disconnect(receiver)


@pytest_asyncio.fixture
async def close_async_connections() -> AsyncIterator[None]:
    """aenqueue/aget_result run in asgiref's sync thread, which opens its own connection: close it."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.mark.parametrize(
    ("task_priority", "expected"),
    [(100, 1), (1, 1), (0, 2), (-1, 3), (-50, 3), (-51, 4), (-100, 4)],
)
def test_job_priority__maps_framework_range_onto_ours_in_order(task_priority: int, expected: int) -> None:
    assert job_priority(task_priority) == expected


def test_job_priority__never_inverts_order() -> None:
    mapped = [job_priority(p) for p in range(100, -101, -1)]  # from soonest to latest
    assert mapped == sorted(mapped)
    assert set(mapped) == {1, 2, 3, 4}


def test_backend__supports_every_feature() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, AwaBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


@pytest.mark.django_db
def test_enqueue__writes_one_job_row_for_the_task() -> None:
    result = echo.using(priority=10).enqueue(1, "two", (3, 4), key={"nested": [True, None]})

    job = Job.objects.get(pk=int(result.id))
    assert job.kind == "tests.tasks.tasks.echo"
    assert job.args == {"args": [1, "two", [3, 4]], "kwargs": {"key": {"nested": [True, None]}}}
    assert job.queue == "default"
    assert job.priority == 1
    assert job.max_attempts == 1  # the framework's one attempt, unless OPTIONS say more
    assert job.state == "available"
    assert job.metadata == {"task": {"backend": "default", "priority": 10, "run_after": None}}

    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at == job.created_at
    assert result.started_at is None and result.finished_at is None and result.last_attempted_at is None
    assert result.args == [1, "two", [3, 4]]
    assert result.kwargs == {"key": {"nested": [True, None]}}
    assert result.backend == "default"
    assert result.errors == [] and result.attempts == 0
    assert result.task.func is echo.func and result.task.priority == 10


@pytest.mark.django_db
def test_enqueue__run_after_becomes_run_at_and_the_job_waits_scheduled() -> None:
    run_after = timezone.now() + timedelta(hours=1)
    result = add.using(run_after=run_after).enqueue(1, 2)

    job = Job.objects.get(pk=int(result.id))
    assert job.state == "scheduled"
    assert job.run_at == run_after
    fetched = add.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert fetched.task.run_after == run_after


@pytest.mark.django_db
def test_enqueue__max_attempts_comes_from_the_backend_options() -> None:
    settings = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}
    with override_settings(TASKS=settings):
        result = add.enqueue(1, 2)
    assert Job.objects.get(pk=int(result.id)).max_attempts == 3


@pytest.mark.django_db
def test_enqueue__args_json_cannot_hold_are_refused_and_nothing_is_written() -> None:
    with pytest.raises(TypeError, match="args"):
        echo.enqueue(object())
    with pytest.raises(TypeError, match="kwargs"):
        echo.enqueue(when=timezone.now())
    assert not Job.objects.exists()


def test_validation__function_not_at_module_level_is_refused() -> None:
    with pytest.raises(InvalidTask, match="module level"):

        @task()
        def inner() -> None:
            pass


def test_validation__queue_outside_QUEUES_is_refused() -> None:
    with pytest.raises(InvalidTask, match="elsewhere"):
        add.using(queue_name="elsewhere")


@pytest.mark.parametrize("priority", [101, -101])
def test_validation__priority_outside_the_framework_range_is_refused(priority: int) -> None:
    with pytest.raises(InvalidTask, match="priority"):
        add.using(priority=priority)


def test_validation__naive_run_after_is_refused() -> None:
    with pytest.raises(InvalidTask, match="aware"):
        add.using(run_after=timezone.now().replace(tzinfo=None))


@pytest.mark.parametrize(
    ("options", "queues", "message"),
    [
        ({"MAX_ATTEMPTS": 0}, ["default"], "MAX_ATTEMPTS"),
        ({"MAX_ATTEMPTS": "5"}, ["default"], "MAX_ATTEMPTS"),
        ({"RETRIES": 5}, ["default"], "unknown option"),
        ({}, ["x" * 256], "QUEUES"),
    ],
)
def test_backend__bad_configuration_is_refused_when_loaded(
    options: dict[str, Any], queues: list[str], message: str
) -> None:
    with (
        override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": queues, "OPTIONS": options}}),
        pytest.raises(InvalidTaskBackend, match=message),
    ):
        task_backends["default"]


@pytest.mark.django_db(transaction=True)
def test_enqueue__rolled_back_transaction_leaves_no_task_and_sends_no_signal(enqueued: list[Any]) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        result = add.enqueue(1, 2)
        assert Job.objects.filter(pk=int(result.id)).exists()  # inside: the caller sees its own row
        raise RuntimeError("roll back")

    assert not Job.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(result.id)
    assert enqueued == []


@pytest.mark.django_db(transaction=True)
def test_task_enqueued__is_sent_when_the_transaction_commits(enqueued: list[Any]) -> None:
    with transaction.atomic():
        result = add.enqueue(1, 2)
        assert enqueued == []
    assert len(enqueued) == 1
    sender, sent = enqueued[0]
    assert sender is AwaBackend
    assert sent.id == result.id and sent.status == TaskResultStatus.READY


# --- one statement per enqueue, as Django's database backend --------------------------------

PRIORITY = st.none() | st.integers(min_value=-100, max_value=100)  # None: the task's default


def enqueue_counted(priority: int | None) -> tuple[Any, list[str]]:
    """Enqueue ``label`` at ``priority`` and return its result and every statement it sent."""
    task_ = label if priority is None else label.using(priority=priority)
    task_.enqueue("warm")  # the enqueue notices read the live workers at most once a window: not this one
    with CaptureQueriesContext(connections["default"]) as captured:
        result = task_.enqueue("counted")
    return result, [query["sql"] for query in captured.captured_queries]


def assert_one_insert(result: Any, statements: list[str], priority: int | None) -> None:
    assert len(statements) == 1 and statements[0].lstrip().startswith("INSERT INTO"), statements
    job = Job.objects.get(pk=int(result.id))
    assert job.state == "available"
    # The head start inside the lane is still taken from the database's clock, in that INSERT.
    assert job.run_at == job.created_at - head_start(0 if priority is None else priority)


@pytest.mark.django_db(transaction=True)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priority=PRIORITY)
@example(priority=None)
def test_enqueue__autocommit__is_one_statement_at_any_priority(priority: int | None) -> None:
    result, statements = enqueue_counted(priority)
    assert_one_insert(result, statements, priority)


@pytest.mark.django_db(transaction=True)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priority=PRIORITY, immediate=st.booleans())
@example(priority=None, immediate=False)
def test_enqueue__inside_a_transaction__is_one_statement_at_any_priority(priority: int | None, immediate: bool) -> None:
    """In immediate mode too: the task runs at the commit, and until then the enqueue is the INSERT."""
    with override_settings(AWA={"EXECUTION": "immediate"} if immediate else {}), transaction.atomic():
        result, statements = enqueue_counted(priority)
        assert_one_insert(result, statements, priority)
        transaction.set_rollback(True)  # nothing runs, nothing stays


@pytest.mark.django_db
def test_enqueue__assert_num_queries_on_the_default_and_the_extremes(
    django_assert_num_queries: Any,
) -> None:
    for task_ in (add, add.using(priority=100), add.using(priority=-100), add.using(priority=37)):
        task_.enqueue(0, 0)  # the notices' window
        with django_assert_num_queries(1):
            task_.enqueue(1, 2)


@pytest.mark.django_db
def test_get_result__unknown_ids_and_plain_jobs_do_not_exist() -> None:
    plain = Job.objects.enqueue("noop")
    for result_id in ["not-a-number", "999999999", str(plain.pk)]:
        with pytest.raises(TaskResultDoesNotExist):
            add.get_result(result_id)


@pytest.mark.django_db
def test_get_result__only_the_digits_str_wrote_name_a_job() -> None:
    """int() reads " 5", "5 ", "+5", "0_5" and a full-width "5" as 5: each would name the
    task's job under an id it never had."""
    result = add.enqueue(1, 2)
    assert add.get_result(result.id).id == result.id
    job_id = int(result.id)
    for spelled in [
        f" {job_id}",
        f"{job_id} ",
        f"+{job_id}",
        f"0_{job_id}",
        str(job_id).translate({48 + d: 0xFF10 + d for d in range(10)}),
        "9" * 40,
    ]:
        with pytest.raises(TaskResultDoesNotExist):
            add.get_result(spelled)


@pytest.mark.django_db
def test_get_result__states_map_onto_statuses() -> None:
    result = add.enqueue(1, 2)
    expected = {
        "scheduled": TaskResultStatus.READY,
        "available": TaskResultStatus.READY,
        "retryable": TaskResultStatus.READY,
        "running": TaskResultStatus.RUNNING,
        "completed": TaskResultStatus.SUCCESSFUL,
        "failed": TaskResultStatus.FAILED,
        "cancelled": TaskResultStatus.FAILED,
    }
    for state, status in expected.items():
        Job.objects.filter(pk=int(result.id)).update(state=state)
        assert add.get_result(result.id).status == status, state


@pytest.mark.django_db
def test_get_result__errors_become_task_errors() -> None:
    result = flaky.enqueue("x")
    entries: list[dict[str, Any]] = [
        {"error": "ValueError: boom", "traceback": "Traceback …\nValueError: boom\n", "attempt": 1},
        {"error": "tests.tasks.tasks.BoomError: bang", "traceback": "Traceback …\nBoomError\n", "attempt": 2},
        {"error": "deadline exceeded: the handler ran longer than 5.0s", "traceback": "…\nTimeoutError\n"},
        {"error": "cancelled: by the handler", "attempt": 4},
    ]
    Job.objects.filter(pk=int(result.id)).update(errors=entries, attempt=4, state="failed")

    errors = flaky.get_result(result.id).errors
    assert [e.exception_class_path for e in errors] == [
        "builtins.ValueError",
        "tests.tasks.tasks.BoomError",
        "builtins.TimeoutError",
        "awa_django.exceptions.AwaError",
    ]
    assert errors[0].exception_class is ValueError
    assert errors[0].traceback == entries[0]["traceback"]
    assert "deadline exceeded" in errors[2].traceback
    assert errors[3].traceback == "cancelled: by the handler"


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_aenqueue_and_aget_result__work_from_async_code(close_async_connections: None) -> None:
    result = await add_async.aenqueue(4, 5)
    fetched = await add_async.aget_result(result.id)
    assert fetched.id == result.id
    assert fetched.status == TaskResultStatus.READY
    assert fetched.args == [4, 5]
    assert await Job.objects.filter(pk=int(result.id), kind="tests.tasks.tasks.add_async").aexists()
