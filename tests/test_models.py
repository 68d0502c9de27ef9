"""The models: database constraints that hold even behind the API, the state QuerySet, the factories."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from awa_django.models import Job, JobState, Queue, WorkerInstance
from tests.factories import JobFactory, QueueFactory


def assert_refused(factory: Any, constraint: str, **fields: Any) -> None:
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        factory(**fields)
    assert constraint in str(caught.value)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        pytest.param({"weight": 0}, "awa_queue_weight_positive", id="weight-0"),
        pytest.param({"min_workers": -1}, "min_workers", id="min-workers-negative"),
        pytest.param({"max_workers": 0}, "awa_queue_max_workers_positive", id="max-workers-0"),
        pytest.param({"rate_limit": 0}, "awa_queue_rate_limit_positive", id="rate-limit-0"),
        pytest.param({"rate_limit": -1}, "awa_queue_rate_limit_positive", id="rate-limit-negative"),
        pytest.param({"rate_burst": -1}, "rate_burst", id="rate-burst-negative"),
        pytest.param({"name": ""}, "awa_queue_name_not_empty", id="name-empty"),
    ],
)
def test_queue__database_refuses_what_can_never_be_valid(fields: dict[str, Any], constraint: str) -> None:
    assert_refused(QueueFactory, constraint, **fields)
    assert not Queue.objects.exists()


@pytest.mark.django_db
def test_queue__name_is_unique() -> None:
    QueueFactory(name="emails")

    assert_refused(QueueFactory, "name", name="emails")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        pytest.param({"priority": 9}, "awa_job_priority_range", id="priority-9"),
        pytest.param({"priority": 0}, "awa_job_priority_range", id="priority-0"),
        pytest.param({"max_attempts": 0}, "awa_job_max_attempts_range", id="max-attempts-0"),
        pytest.param({"max_attempts": 1001}, "awa_job_max_attempts_range", id="max-attempts-1001"),
        pytest.param({"attempt": -1}, "awa_job_attempt_non_negative", id="attempt-negative"),
        pytest.param({"kind": ""}, "awa_job_kind_not_empty", id="kind-empty"),
        pytest.param({"queue": ""}, "awa_job_queue_not_empty", id="queue-empty"),
        pytest.param({"state": "done"}, "awa_job_state_valid", id="state-unknown"),
    ],
)
def test_job__database_refuses_what_can_never_be_valid(fields: dict[str, Any], constraint: str) -> None:
    assert_refused(JobFactory, constraint, **fields)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_job__unique_index_holds_for_orm_writes_too() -> None:
    JobFactory(unique_key="k", unique_states=["available"])

    assert_refused(JobFactory, "awa_job_unique_key_uniq", unique_key="k", unique_states=["available", "running"])
    JobFactory(unique_key="k", unique_states=["available"], state=JobState.COMPLETED)
    JobFactory(unique_key="k", unique_states=["running"], state=JobState.AVAILABLE)
    assert Job.objects.filter(unique_key="k").count() == 3


@pytest.mark.django_db
def test_job__factory_defaults_satisfy_every_constraint() -> None:
    job = JobFactory()
    job.full_clean()

    assert Job.objects.get(pk=job.pk).state == JobState.AVAILABLE


@pytest.mark.django_db
def test_job_queryset__state_methods_select_exactly_their_state() -> None:
    jobs = {state: JobFactory(state=state) for state in [s.value for s in JobState]}

    for state, job in jobs.items():
        assert list(getattr(Job.objects, state)()) == [job], state
    assert set(Job.objects.finished()) == {jobs["completed"], jobs["failed"], jobs["cancelled"]}


@pytest.mark.django_db
def test_job_queryset__stale_is_running_with_an_old_heartbeat() -> None:
    now = timezone.now()
    stale = JobFactory(state=JobState.RUNNING, heartbeat_at=now - timedelta(minutes=5))
    JobFactory(state=JobState.RUNNING, heartbeat_at=now)
    JobFactory(state=JobState.RETRYABLE, heartbeat_at=now - timedelta(minutes=5))

    assert list(Job.objects.stale(older_than=timedelta(minutes=1))) == [stale]


@pytest.mark.django_db
def test_job__is_terminal_only_in_finished_states() -> None:
    terminal = {state for state in [s.value for s in JobState] if JobFactory.build(state=state).is_terminal}

    assert terminal == {"completed", "failed", "cancelled"}


def test_job__str_names_kind_id_and_state() -> None:
    assert str(Job(pk=12, kind="noop", state=JobState.RUNNING)) == "noop#12 (running)"


@pytest.mark.django_db
def test_job__finished_trait_sets_state_and_finalized_at() -> None:
    job = JobFactory(finished=True)

    assert job.state == JobState.COMPLETED
    assert job.finalized_at is not None


@pytest.mark.django_db
def test_queue__defaults() -> None:
    queue = Queue.objects.create(name="emails")

    assert (queue.max_workers, queue.min_workers, queue.weight, queue.rate_limit, queue.paused) == (
        50,
        0,
        1,
        None,
        False,
    )
    assert str(queue) == "emails"


def test_worker_instance__capacity_reads_a_queue_entry() -> None:
    worker = WorkerInstance(queues={"emails": {"in_flight": 2}, "broken": 3})

    assert worker.capacity("emails") == {"in_flight": 2}
    assert worker.capacity("broken") is None
    assert worker.capacity("missing") is None


@pytest.mark.django_db
def test_job__full_clean_reports_a_unique_key_held_by_an_active_job() -> None:
    from django.core.exceptions import ValidationError

    JobFactory(unique_key="k", unique_states=["available"])

    with pytest.raises(ValidationError, match="awa_job_unique_key_uniq"):
        JobFactory.build(unique_key="k", unique_states=["available"]).full_clean()
    JobFactory.build(unique_key="k", unique_states=["available"], state=JobState.COMPLETED).full_clean()


def test_verbose_names__no_plural_made_by_appending_s_to_a_y() -> None:
    """The admin's model list reads these; "Worker capacitys" was one."""
    import re

    from django.apps import apps

    for model in apps.get_app_config("awa").get_models():
        plural = str(model._meta.verbose_name_plural)
        assert not re.search(r"[^aeiou]ys$", plural), (model.__name__, plural)
