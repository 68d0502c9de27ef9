"""A duration column written past what Python's timedelta holds (about 2.7 million years; Postgres's
interval goes to 178 million) by SQL or another producer: the driver refused the whole row, and the
job's page, the job list and the Queue admin answered 500. Such a value now reads as
``READABLE_DURATION_DAYS`` days with its sign (models.ReadableDurationField); any value a timedelta
holds below that bound reads exactly as before.

The test client re-raises any exception a view lets escape, so a 500 fails these tests with the
exception itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import DataError, connection, transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.models import READABLE_DURATION_DAYS, Job, Queue
from tests.admin.conftest import client_for
from tests.factories import JobFactory, QueueFactory

BOUND = timedelta(days=READABLE_DURATION_DAYS)
# Past the timedelta's range, past the bound only, Postgres's own limits, and a sum of units that
# Postgres and the driver count differently (years of 365.25 and of 365 days).
PAST = [
    ("3000000 years", BOUND),
    ("-3000000 years", -BOUND),
    ("178000000 years", BOUND),
    ("-178000000 years", -BOUND),
    ("2740000 years", BOUND),
    ("2000000000 days", BOUND),
    ("100000000 years -2000000000 days", BOUND),
    ("-100000000 years 2000000000 days", -BOUND),
    ("2147483647 hours", timedelta(hours=2147483647)),
]


@pytest.fixture
def admin_client(db: None) -> Client:
    return client_for(User.objects.create_superuser("root", password=None))


def set_column(table: str, column: str, pk: int, interval: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s::interval WHERE id = %s", [interval, pk])


@pytest.mark.django_db
@pytest.mark.parametrize(("interval", "reads"), PAST, ids=[p[0] for p in PAST])
def test_job_timeout_past_timedeltas_range__reads_as_the_bound__pages_load(
    admin_client: Client, interval: str, reads: timedelta
) -> None:
    QueueFactory(name="q")
    job = JobFactory(kind="long", queue="q")
    set_column("awa_job", "timeout", job.pk, interval)

    assert Job.objects.get(pk=job.pk).timeout == reads
    assert Job.objects.filter(pk=job.pk).values_list("timeout", flat=True).get() == reads
    assert admin_client.get(reverse("admin:awa_job_change", args=[job.pk])).status_code == 200
    assert admin_client.get(reverse("admin:awa_job_changelist")).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("column", ["deadline", "priority_aging"])
@pytest.mark.parametrize(("interval", "reads"), PAST[:2], ids=[p[0] for p in PAST[:2]])
def test_queue_duration_past_timedeltas_range__reads_as_the_bound__pages_load(
    admin_client: Client, column: str, interval: str, reads: timedelta
) -> None:
    queue = QueueFactory(name="q")
    set_column("awa_queue", column, queue.pk, interval)

    assert getattr(Queue.objects.get(pk=queue.pk), column) == reads
    assert admin_client.get(reverse("admin:awa_queue_change", args=[queue.pk])).status_code == 200
    assert admin_client.get(reverse("admin:awa_queue_changelist")).status_code == 200


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.timedeltas(min_value=-BOUND, max_value=BOUND),
)
def test_a_duration_a_timedelta_holds_under_the_bound__reads_back_exactly(value: timedelta) -> None:
    job = JobFactory(kind="exact", queue="q")
    Job.objects.filter(pk=job.pk).update(timeout=value)
    assert Job.objects.get(pk=job.pk).timeout == value


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    years=st.integers(-178_000_000, 178_000_000),
    days=st.integers(-(2**31) + 1, 2**31 - 1),
    hours=st.integers(-2_000_000_000, 2_000_000_000),
)
def test_any_interval_postgres_holds__loads_as_itself_or_as_the_bound(years: int, days: int, hours: int) -> None:
    job = JobFactory(kind="any", queue="q")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE awa_job SET timeout = make_interval(years => %s, days => %s, hours => %s) WHERE id = %s",
                [years, days, hours, job.pk],
            )
    except DataError:  # an interval Postgres itself cannot hold ("interval out of range"): nothing to read
        return
    read = Job.objects.get(pk=job.pk).timeout
    assert read is not None
    assert -BOUND <= read <= BOUND
