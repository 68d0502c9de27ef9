"""awa.E005: the Queue rows' min_workers must fit in AWA['GLOBAL_MAX_WORKERS']."""

from __future__ import annotations

import pytest
from django.core.checks import Error, run_checks
from django.db import connection
from django.test import override_settings

from awa_django.checks import check_capacity
from tests.factories import QueueFactory


@pytest.mark.django_db
@override_settings(AWA={"GLOBAL_MAX_WORKERS": 20})
def test_check_capacity__sum_of_min_workers_over_the_global_maximum_is_e005_naming_both() -> None:
    QueueFactory(name="emails", min_workers=15)
    QueueFactory(name="reports", min_workers=10)

    messages = check_capacity()

    assert [m.id for m in messages] == ["awa.E005"]
    (error,) = messages
    assert isinstance(error, Error)
    assert "sum of min_workers (25)" in error.msg
    assert "AWA['GLOBAL_MAX_WORKERS'] (20)" in error.msg
    assert error.hint is not None
    assert "at least 25" in error.hint
    assert "by 5 in total" in error.hint
    assert "emails=15, reports=10" in error.hint
    assert "awa.E005" in [m.id for m in run_checks()]


@pytest.mark.django_db
@override_settings(AWA={"GLOBAL_MAX_WORKERS": 25})
def test_check_capacity__a_sum_equal_to_the_maximum_passes() -> None:
    QueueFactory(name="emails", min_workers=15)
    QueueFactory(name="reports", min_workers=10)
    assert check_capacity() == []


@pytest.mark.django_db
def test_check_capacity__hard_reserved_mode_reads_nothing(django_assert_num_queries: object) -> None:
    QueueFactory(name="emails", min_workers=500)
    with django_assert_num_queries(0):  # type: ignore[operator]
        assert check_capacity() == []


@pytest.mark.django_db
@override_settings(AWA={"GLOBAL_MAX_WORKERS": 20})
def test_check_capacity__is_skipped_before_migrate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE awa_queue RENAME TO awa_queue_hidden")
    try:
        assert check_capacity() == []
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE awa_queue_hidden RENAME TO awa_queue")
