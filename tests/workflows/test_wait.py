"""Awaiting a job: Job.wait / await_result return the result or raise the job's error, woken by a
NOTIFY on awa_done that is sent only for jobs someone registered, or by polling with LISTEN off."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from awa_django.models import Job
from awa_django.sql import DONE_CHANNEL, statements
from awa_django.testing import run_jobs
from awa_django.workflows import Workflow
from awa_django.workflows.waiting import JobFailedError, JobMissingError
from tests.conftest import connect_outside_django
from tests.test_enqueue import close_async_connections as close_async_connections
from tests.worker.support import Spawner
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers


def _done_listener() -> psycopg.Connection[Any]:
    conn = connect_outside_django()
    conn.execute(f"LISTEN {DONE_CHANNEL}")
    return conn


def _drain(conn: psycopg.Connection[Any]) -> list[str]:
    """Every awa_done payload delivered before a sentinel sent now (see tests/conftest.Listener)."""
    sentinel = f"sentinel-{uuid.uuid4()}"
    with connect_outside_django() as sender:
        sender.execute("SELECT pg_notify(%s, %s)", (DONE_CHANNEL, sentinel))
    payloads: list[str] = []
    for notify in conn.notifies(timeout=30):
        if notify.payload == sentinel:
            return payloads
        payloads.append(notify.payload)
    raise AssertionError(f"the sentinel did not arrive; got {payloads}")


def _unregister(job_id: int | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statements["unregister_job_waiter"], {"id": job_id, "token": "t"})


@pytest.mark.django_db(transaction=True)
def test_done_notify__sent_for_a_registered_job_and_not_for_a_plain_one() -> None:
    awaited = Job.objects.enqueue("wf.value", {"value": 1})
    plain = Job.objects.enqueue("wf.value", {"value": 2})
    with connection.cursor() as cursor:
        cursor.execute(statements["register_job_waiter"], {"id": awaited.pk, "token": "t"})
    conn = _done_listener()
    try:
        run_jobs()

        assert _drain(conn) == [str(awaited.pk)]
        assert Job.objects.get(pk=plain.pk).state == "completed"
    finally:
        conn.close()
        _unregister(awaited.pk)


@pytest.mark.django_db(transaction=True)
def test_done_notify__a_cascaded_cancel_tells_its_waiter() -> None:
    wf = Workflow("cancel-cascade")
    bad = wf.add("wf.fail")
    dependent = wf.add("wf.value", after=[bad])
    wf.enqueue()
    with connection.cursor() as cursor:
        cursor.execute(statements["register_job_waiter"], {"id": dependent.id, "token": "t"})
    conn = _done_listener()
    try:
        run_jobs(raise_on_failure=False)

        assert _drain(conn) == [str(dependent.id)]
    finally:
        conn.close()
        _unregister(dependent.id)


@pytest.mark.subprocess
@pytest.mark.parametrize("listen", [True, False], ids=["listen", "polling"])
def test_wait__returns_the_result_a_worker_stored(spawn: Spawner, listen: bool) -> None:
    spawn("-q", "wf_wait")
    job = Job.objects.enqueue("demo_wf_node", {"value": 41}, queue="wf_wait")

    with override_settings(AWA={"LISTEN": listen}):
        result = job.wait(timeout=60)

    assert result == {"v": 41, "seen": {}}
    assert result == Job.objects.get(pk=job.pk).result


@pytest.mark.subprocess
def test_wait__a_failed_job_raises_with_its_error(spawn: Spawner) -> None:
    spawn("-q", "wf_wait")
    job = Job.objects.enqueue("demo_wf_node", {"value": 1, "outcome": "fail"}, queue="wf_wait")

    with pytest.raises(JobFailedError, match=rf"job {job.pk} ended failed: .*planned failure"):
        job.wait(timeout=60)


@pytest.mark.subprocess
@pytest.mark.asyncio
async def test_await_result__returns_the_result(spawn: Spawner, close_async_connections: None) -> None:
    spawn("-q", "wf_wait")
    job = await Job.objects.aenqueue("demo_wf_node", {"value": 7}, queue="wf_wait")

    assert await job.await_result(timeout=60) == {"v": 7, "seen": {}}


@pytest.mark.django_db(transaction=True)
def test_wait__times_out_naming_the_job_and_leaves_no_waiter_row() -> None:
    job = Job.objects.enqueue("wf.value", queue="nobody_serves_this")

    with pytest.raises(TimeoutError, match=rf"job {job.pk} did not end within 0.05 s"):
        job.wait(timeout=0.05)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa_job_waiter WHERE job_id = %s", [job.pk])
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db(transaction=True)
def test_wait__an_unknown_job_raises_missing() -> None:
    with pytest.raises(JobMissingError, match="job 987654321 does not exist"):
        Job(pk=987654321).wait(timeout=1)
