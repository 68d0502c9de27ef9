"""``wait`` on Django's own connection (autocommit, outside any atomic block, no pooler): no connect
of its own, the result parsed as on a connection of its own, a job ending later awaited, and the
connection left as it was found (no LISTEN, no registration)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

from awa_django.models import Job
from awa_django.testing import run_jobs
from awa_django.workflows.waiting import _borrowable
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db(transaction=True)
RESULT: dict[str, Any] = {"a": [1, 2], "text": "x"}


def left_behind() -> tuple[list[Any], int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_listening_channels()")
        channels = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT count(*) FROM awa_job_waiter")
        (waiters,) = cursor.fetchone()
    return channels, waiters


def test_borrowable__django_s_connection_only_in_autocommit_outside_atomic_and_without_a_pooler() -> None:
    connection.ensure_connection()
    assert _borrowable("default") is connection.connection
    with transaction.atomic():
        assert _borrowable("default") is None
    with override_settings(AWA={"POOLER": "transaction"}):
        assert _borrowable("default") is None


def test_wait__on_django_s_connection_returns_the_parsed_result_and_leaves_it_clean() -> None:
    job = Job.objects.enqueue("wf.value", {"value": RESULT})
    run_jobs()

    assert job.wait(timeout=10) == RESULT
    assert left_behind() == ([], 0)


def test_wait__on_django_s_connection_returns_once_the_job_ends_later() -> None:
    job = Job.objects.enqueue("wf.value", {"value": RESULT})
    failures: list[BaseException] = []

    def finish_once_awaited() -> None:
        try:
            with connections["default"].cursor() as cursor:  # this thread's own connection
                for _ in range(10_000):  # until the waiter has registered (bounded)
                    cursor.execute("SELECT 1 FROM awa_job_waiter WHERE job_id = %s", [job.pk])
                    if cursor.fetchone():
                        break
            run_jobs()
        except BaseException as exc:  # reported by the test below
            failures.append(exc)
        finally:
            connections["default"].close()

    runner = threading.Thread(target=finish_once_awaited)
    runner.start()
    try:
        assert job.wait(timeout=30) == RESULT
    finally:
        runner.join(30)
    assert failures == []
    assert left_behind() == ([], 0)
