"""Enqueue defaults come from the kind's @job options; a job nobody will run is logged, once.

Why: ``Job.objects.enqueue("send_welcome", …)`` without ``queue=`` must land on ``emails`` when
the handler is registered there; in ``default`` a worker serving ``emails`` would never see it,
and nothing would say so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.defaults import MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT, QUEUE_DEFAULT
from awa_django.models import Job, WorkerInstance
from awa_django.notices import notices
from awa_django.registry import job, registry
from tests.harness import make_config, running_worker, wait_until

KIND = "test_send_welcome"
HANDLER_OPTIONS = {"queue": "emails", "priority": 1, "max_attempts": 5}


@pytest.fixture(autouse=True)
def registered_kind() -> Iterator[None]:
    @job(KIND, **HANDLER_OPTIONS)  # type: ignore[arg-type]
    def send_welcome(user_id: int = 0) -> None:
        return None

    notices.reset()
    try:
        yield
    finally:
        registry.unregister(KIND)
        notices.reset()


def stored(job_id: int) -> tuple[str, int, int]:
    row = Job.objects.get(pk=job_id)
    return row.queue, row.priority, row.max_attempts


@pytest.mark.django_db
def test_enqueue__registered_kind_without_options__gets_the_handlers_queue_priority_attempts() -> None:
    enqueued = Job.objects.enqueue(KIND, {"user_id": 1})

    assert stored(enqueued.pk) == ("emails", 1, 5)
    assert (enqueued.queue, enqueued.priority, enqueued.max_attempts) == ("emails", 1, 5)


@pytest.mark.django_db
def test_enqueue__unregistered_kind__gets_the_package_defaults() -> None:
    enqueued = Job.objects.enqueue("test_not_registered_anywhere")

    assert stored(enqueued.pk) == (QUEUE_DEFAULT, PRIORITY_DEFAULT, MAX_ATTEMPTS_DEFAULT)


@pytest.mark.django_db
def test_aenqueue__registered_kind__gets_the_handlers_options() -> None:
    enqueued = async_to_sync(Job.objects.aenqueue)(KIND, {"user_id": 2})

    assert stored(enqueued.pk) == ("emails", 1, 5)


OPTIONS = st.fixed_dictionaries(
    {"kind": st.sampled_from([KIND, "test_other_kind"])},
    optional={
        "queue": st.sampled_from(["default", "reports", None]),
        "priority": st.sampled_from([1, 2, 3, 4, None]),
        "max_attempts": st.sampled_from([1, 2, 25, 1000, None]),
    },
)
PLAIN = {"queue": QUEUE_DEFAULT, "priority": PRIORITY_DEFAULT, "max_attempts": MAX_ATTEMPTS_DEFAULT}


def expected_row(spec: dict[str, Any]) -> tuple[str, str, int, int]:
    defaults = HANDLER_OPTIONS if spec["kind"] == KIND else PLAIN
    values = [
        defaults[name] if spec.get(name) is None else spec[name] for name in ("queue", "priority", "max_attempts")
    ]
    return (spec["kind"], *values)  # type: ignore[return-value]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(OPTIONS, min_size=1, max_size=6), path=st.sampled_from(["enqueue", "many_fast", "many_full"]))
@pytest.mark.django_db
def test_enqueue__every_path__option_given_wins_else_the_kinds(specs: list[dict[str, Any]], path: str) -> None:
    Job.objects.all().delete()
    if path == "enqueue":
        for spec in specs:
            options = {k: v for k, v in spec.items() if k != "kind"}
            Job.objects.enqueue(spec["kind"], **options)
    else:
        sent = [dict(spec) for spec in specs]
        if path == "many_full":
            for spec in sent:
                spec["run_at"] = timezone.now() - timedelta(seconds=1)  # takes the full validation path
        assert Job.objects.enqueue_many(sent) == len(specs)
    rows = list(Job.objects.order_by("id").values_list("kind", "queue", "priority", "max_attempts"))
    assert rows == [expected_row(spec) for spec in specs]


@pytest.mark.django_db
def test_enqueue_many__mixed_kinds__each_gets_its_own_defaults() -> None:
    Job.objects.enqueue_many([{"kind": KIND}, {"kind": "test_other_kind"}, {"kind": KIND, "queue": "reports"}])

    rows = sorted(Job.objects.values_list("kind", "queue", "priority", "max_attempts"))
    assert rows == [
        ("test_other_kind", QUEUE_DEFAULT, PRIORITY_DEFAULT, MAX_ATTEMPTS_DEFAULT),
        (KIND, "emails", 1, 5),
        (KIND, "reports", 1, 5),
    ]


def warnings_of(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


@pytest.mark.django_db
def test_enqueue__unregistered_kind__warned_once_naming_the_kind_and_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="awa_django")
    Job.objects.enqueue("test_typo_kind")
    Job.objects.enqueue("test_typo_kind")
    Job.objects.enqueue_many([{"kind": "test_typo_kind"}] * 3)
    Job.objects.enqueue(KIND)

    warned = warnings_of(caplog, "test_typo_kind")  # any warning naming the kind, on any logger
    assert len(warned) == 1
    assert "no registered handler" in warned[0]
    assert "kind=test_typo_kind" in warned[0]
    assert "@job('test_typo_kind', ...)" in warned[0]


@pytest.mark.django_db
def test_enqueue__queue_no_live_worker_serves__warned_once_per_queue(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="awa_django")
    WorkerInstance.objects.all().delete()
    Job.objects.enqueue(KIND)
    Job.objects.enqueue(KIND)
    Job.objects.enqueue_many([{"kind": KIND}, {"kind": KIND, "queue": "reports"}])

    warned = warnings_of(caplog, "no live worker serves")
    assert len(warned) == 2
    assert "queue=emails" in warned[0] and "awa_worker -q emails" in warned[0]
    assert "queue=reports" in warned[1]


@pytest.mark.django_db
def test_enqueue__immediate_execution__no_queue_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="awa_django")
    with override_settings(AWA={"EXECUTION": "immediate"}):
        Job.objects.enqueue(KIND, {"user_id": 4})

    assert warnings_of(caplog, "no live worker serves") == []


@pytest.mark.django_db(transaction=True)
def test_enqueue__queue_a_real_worker_serves__no_warning_other_queue_warned(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="awa_django")
    with running_worker(make_config(["emails"])):
        wait_until(
            lambda: WorkerInstance.objects.filter(queues__has_key="emails").exists(),
            timeout=20,
            what="the worker's snapshot listing emails",
        )
        Job.objects.enqueue(KIND, {"user_id": 5})  # lands on emails: served
        Job.objects.enqueue(KIND, {"user_id": 6}, queue="reports")  # nobody serves reports
        wait_until(lambda: Job.objects.completed().filter(queue="emails").count() == 1, what="the emails job done")

    warned = warnings_of(caplog, "no live worker serves")
    assert len(warned) == 1
    assert "queue=reports" in warned[0]
    assert "live_workers_serve=emails" in warned[0]
