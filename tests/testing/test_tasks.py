"""Django's Tasks framework with the same helpers: ``@task`` jobs run by run_jobs in the test's
transaction, sync and async, retries included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from awa_django.testing import assert_enqueued, run_jobs
from tests.tasks import tasks

pytestmark = pytest.mark.django_db


def test_tasks__sync_and_async_tasks_run_and_their_results_read_back():
    label = tasks.label.enqueue("hello")
    added = tasks.add_async.enqueue(2, 3)
    assert_enqueued(tasks.label, args={"args": ["hello"]})  # a @task names its kind

    report = run_jobs()

    assert [(run.kind, run.result) for run in report] == [
        ("tests.tasks.tasks.label", "hello"),
        ("tests.tasks.tasks.add_async", 5),
    ]
    label.refresh()
    added.refresh()
    assert (str(label.status), label.return_value) == ("SUCCESSFUL", "hello")
    assert (str(added.status), added.return_value) == ("SUCCESSFUL", 5)  # type: ignore[comparison-overlap]


# A task gets one attempt unless the backend's OPTIONS say more: this one needs two.
@override_settings(
    TASKS={
        "default": {"BACKEND": "awa_django.backends.AwaBackend", "QUEUES": ["default"], "OPTIONS": {"MAX_ATTEMPTS": 2}}
    }
)
def test_tasks__a_failing_attempt_is_retried_with_its_context():
    result = tasks.flaky.enqueue("x")

    first = run_jobs(raise_on_failure=False)
    assert [run.state for run in first] == ["retryable"]
    result.refresh()
    assert str(result.status) == "READY"

    [second] = run_jobs(now=timezone.now() + timedelta(hours=1))
    assert second.result == {
        "value": "x",
        "attempt": 2,
        "id": result.id,
        "status": "RUNNING",
        "errors": ["builtins.ValueError"],
    }


def test_tasks__a_failing_task_raises_by_default():
    tasks.boom.enqueue("no")
    with pytest.raises(AssertionError, match=r"tests\.tasks\.tasks\.BoomError: no"):
        run_jobs()
