"""The Tasks backend sets a task's fairness key through ``OPTIONS["FAIR_KEY"]`` (a callable of the
task, its args and kwargs, by dotted path), in each way a task runs: immediate mode, ``run_jobs``
and a real worker; no task argument name is taken for it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job
from awa_django.states import JobState
from awa_django.testing import run_jobs
from tests.harness import make_config, running_worker
from tests.tasks.framework import InvalidTaskBackend, TaskResultStatus, task_backends
from tests.tasks.tasks import echo
from tests.tasks.test_worker import finished, tasks_settings

KEYED = tasks_settings(FAIR_KEY="tests.tasks.keys.tenant_key")


def job_of(result: Any) -> Job:
    return Job.objects.get(pk=int(result.id))


@pytest.mark.django_db(transaction=True)
def test_fair_key__immediate__the_option_keys_the_job_and_the_task_runs() -> None:
    with override_settings(TASKS=KEYED, AWA={"EXECUTION": "immediate"}):
        result = echo.enqueue(1, tenant=42)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"args": [1], "kwargs": {"tenant": 42}}
    assert job_of(result).fair_key == "tenant:42"


@pytest.mark.django_db
def test_fair_key__run_jobs__keyed_and_unkeyed_tasks_both_complete_with_their_keys() -> None:
    with override_settings(TASKS=KEYED):
        keyed, unkeyed = echo.enqueue(tenant="a"), echo.enqueue(2)
        report = run_jobs()

    assert [run.state for run in report] == [JobState.COMPLETED, JobState.COMPLETED]
    assert (job_of(keyed).fair_key, job_of(unkeyed).fair_key) == ("tenant:a", "")


@pytest.mark.django_db(transaction=True)
def test_fair_key__worker__runs_the_keyed_task_and_the_row_keeps_its_key() -> None:
    with override_settings(TASKS=KEYED):
        result = echo.enqueue(tenant=7)
        with running_worker(make_config(["default"])):
            done = finished(echo, result.id)

    assert done.status == TaskResultStatus.SUCCESSFUL
    assert (job_of(result).state, job_of(result).fair_key) == (JobState.COMPLETED, "tenant:7")


@pytest.mark.django_db
def test_fair_key__without_the_option__the_default_key_and_a_fair_key_kwarg_is_only_a_kwarg() -> None:
    result = echo.enqueue(fair_key="mine")

    job = job_of(result)
    assert job.fair_key == ""
    assert job.args == {"args": [], "kwargs": {"fair_key": "mine"}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("tests.tasks.keys.raising_key", r"\['FAIR_KEY'\] raised LookupError\('no tenant for echo'\) for task "),
        ("tests.tasks.keys.bad_key", r"fair_key=42: returned by .*\['FAIR_KEY'\] for task .*must be a str"),
    ],
)
def test_fair_key__a_function_that_fails__refused_naming_the_option_and_the_task(path: str, says: str) -> None:
    with override_settings(TASKS=tasks_settings(FAIR_KEY=path)), pytest.raises(InvalidJobError, match=says):
        echo.enqueue(tenant=1)

    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("tests.tasks.keys.missing", r"\['FAIR_KEY'\]='tests.tasks.keys.missing' does not import"),
        ("tests.tasks.keys.NOT_CALLABLE", r"\['FAIR_KEY'\]='tenant': must be a callable \(task, args, kwargs\)"),
        (42, r"\['FAIR_KEY'\]=42: must be a callable"),
    ],
)
def test_fair_key__a_bad_option__refused_when_the_backend_loads(value: object, says: str) -> None:
    with override_settings(TASKS=tasks_settings(FAIR_KEY=value)), pytest.raises(InvalidTaskBackend, match=says):
        task_backends["default"]
