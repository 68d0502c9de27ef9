"""The Queue admin form applies the capacity rules of concurrency.validation, naming the numbers."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from awa_django.forms import QueueForm
from awa_django.models import Queue, WorkerInstance
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db

VALID = {
    "name": "emails",
    "paused": False,
    "max_workers": 10,
    "min_workers": 0,
    "weight": 1,
    "rate_limit": "",
    "rate_burst": 0,
    "deadline": "",
    "priority_aging": "",
}


def form(instance: Queue | None = None, **changes: Any) -> QueueForm:
    return QueueForm(data={**VALID, **changes}, instance=instance)


def errors(f: QueueForm, field: str) -> str:
    assert not f.is_valid()
    return " ".join(f.errors[field])  # type: ignore[arg-type]  # an ErrorList holds str messages


def test_queue_form__valid_settings_save() -> None:
    f = form(rate_limit="2.5", rate_burst=5, deadline="00:05:00", priority_aging="00:10:00", weight=3)
    assert f.is_valid(), f.errors
    queue = f.save()
    assert (queue.weight, queue.rate_limit, queue.rate_burst) == (3, 2.5, 5)
    assert queue.deadline == timedelta(minutes=5)
    assert queue.priority_aging == timedelta(minutes=10)


def test_queue_form__weight_zero_is_refused_naming_the_value() -> None:
    message = errors(form(weight=0), "weight")
    assert "weight 0 is invalid" in message
    assert "at least 1" in message


@pytest.mark.parametrize(
    ("field", "value", "minimum"),
    [("min_workers", -1, 0), ("max_workers", 0, 1), ("max_workers", -3, 1), ("rate_burst", -2, 0)],
)
def test_queue_form__worker_counts_below_their_minimum_are_refused(field: str, value: int, minimum: int) -> None:
    message = errors(form(**{field: value}), field)  # type: ignore[arg-type]
    assert f"{field} {value} is invalid" in message
    assert f"at least {minimum}" in message


@pytest.mark.parametrize("rate", ["0", "-1.5"])
def test_queue_form__rate_limit_of_zero_or_less_is_refused(rate: str) -> None:
    message = errors(form(rate_limit=rate), "rate_limit")
    assert f"rate limit {float(rate)!r} jobs/s is invalid" in message
    assert "above 0" in message


@pytest.mark.parametrize("field", ["deadline", "priority_aging"])
def test_queue_form__non_positive_durations_are_refused(field: str) -> None:
    assert "positive duration" in errors(form(**{field: "00:00:00"}), field)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["deadline", "priority_aging"])
@pytest.mark.parametrize("value", ["366 00:00:00", "999999999 00:00:00", "P999999999D"])
def test_queue_form__durations_over_a_year_are_refused_naming_the_value(field: str, value: str) -> None:
    """now() plus or minus such a duration leaves Postgres's timestamps: the claim (deadline) or the
    leader's aging round failed, and stopped the worker."""
    message = errors(form(**{field: value}), field)  # type: ignore[arg-type]
    assert "at most 365 days" in message, message


@pytest.mark.parametrize("field", ["deadline", "priority_aging"])
def test_queue_form__a_year_is_accepted(field: str) -> None:
    assert form(**{field: "365 00:00:00"}).is_valid()  # type: ignore[arg-type]


@override_settings(AWA={"GLOBAL_MAX_WORKERS": 20})
def test_queue_form__sum_of_min_workers_over_the_global_maximum_names_both_numbers() -> None:
    QueueFactory(name="reports", min_workers=15)
    message = errors(form(min_workers=10), "min_workers")
    assert "sum of min_workers (25) exceeds global_max_workers (20)" in message
    assert "AWA['GLOBAL_MAX_WORKERS']" in message


@override_settings(AWA={"GLOBAL_MAX_WORKERS": 20})
def test_queue_form__sum_of_min_workers_counts_the_edited_row_once() -> None:
    queue = QueueFactory(name="emails", min_workers=15)
    QueueFactory(name="reports", min_workers=5)
    assert form(instance=queue, min_workers=15).is_valid()
    assert "(21) exceeds global_max_workers (20)" in errors(form(instance=queue, min_workers=16), "min_workers")


def test_queue_form__sum_of_min_workers_is_free_without_a_global_maximum() -> None:
    QueueFactory(name="reports", min_workers=500)
    assert form(min_workers=500).is_valid()


def test_queue_form__sum_of_min_workers_is_checked_against_a_live_workers_global_maximum() -> None:
    now = timezone.now()
    WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="box", pid=7, started_at=now, last_seen_at=now,
        mode="weighted", global_max_workers=8,
    )  # fmt: skip
    WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="gone", pid=8, started_at=now, last_seen_at=now - timedelta(hours=1),
        mode="weighted", global_max_workers=2,
    )  # fmt: skip
    assert form(min_workers=8).is_valid()  # the stale worker's maximum of 2 no longer applies
    message = errors(form(min_workers=9), "min_workers")
    assert "sum of min_workers (9) exceeds global_max_workers (8)" in message
    assert "live worker box:7" in message


@pytest.mark.parametrize(
    "field", ["max_workers", "min_workers", "weight", "rate_burst", "key_weight", "key_max_running"]
)
def test_queue_form__integer_past_the_column_names_the_field_and_value(field: str) -> None:
    message = errors(form(**{field: 99999999999}), field)  # type: ignore[arg-type]
    assert f"{field} 99999999999 is too large" in message, message


@pytest.mark.parametrize("name", ["em\tails", "em\nails", "em\x1bails"])
def test_queue_form__a_name_no_job_could_be_enqueued_into_is_refused(name: str) -> None:
    # enqueue refuses such a queue name (check_name), and so does awa_worker -q: a row saved with
    # it would be a queue no job can ever reach.
    assert "holds a control character" in errors(form(name=name), "name")
    assert not Queue.objects.exists()
