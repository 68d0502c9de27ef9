"""A handler's return value that Postgres cannot store fails the job at once, saying why: it is
not a handler exception, so it is never retried (issue 12, item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.validation import MAX_JSON_DEPTH
from tests.harness import make_config, running_worker
from tests.worker.support import wait_for_row


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        pytest.param(_nested(5_000), f"deeper than {MAX_JSON_DEPTH} levels", id="5000-deep-list"),
        pytest.param({"n": 10**5000}, "too many digits", id="5000-digit-int"),
        pytest.param({"s": "caf\udce9"}, "lone surrogate", id="lone-surrogate"),
    ],
)
def test_result__unstorable_value_fails_the_job_on_its_first_attempt(returned: Any, reason: str) -> None:
    async def handler() -> Any:
        return returned

    registry = Registry()
    registry.register(JobHandler("unstorable", handler, queue="results"))
    job = Job.objects.enqueue("unstorable", queue="results", max_attempts=5)

    with running_worker(make_config(["results"]), registry=registry):
        done = wait_for_row(job.pk, state="failed")

    assert done.attempt == 1  # failed at once, not retried as if the handler had raised
    assert done.result is None
    error = done.errors[-1]["error"]
    assert "cannot be stored as JSON" in error
    assert reason in error
    assert len(error) < 1000


@pytest.mark.django_db(transaction=True)
def test_result__a_deep_but_allowed_value_is_stored() -> None:
    async def handler() -> Any:
        return _nested(MAX_JSON_DEPTH - 1)

    registry = Registry()
    registry.register(JobHandler("deep", handler, queue="results"))
    job = Job.objects.enqueue("deep", queue="results")

    with running_worker(make_config(["results"]), registry=registry):
        done = wait_for_row(job.pk, state="completed")

    assert done.result == _nested(MAX_JSON_DEPTH - 1)
