"""Who runs what: each claim records its worker (host:pid) with the attempt's start; an error entry
carries both; "Running now" lists the running jobs per worker and per queue, page and JSON, with
numbers matching the database; odd filters give an empty list, never a 500."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from awa_django.context import JobContext
from awa_django.models import Job, WorkerInstance
from awa_django.registry import JobHandler, Registry
from tests.admin.conftest import client_for
from tests.factories import JobFactory
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates

A, B = "running_a", "running_b"


@pytest.fixture
def gates() -> Iterator[Gates]:
    value = Gates()
    try:
        yield value
    finally:
        value.open_all()


def _registry(gates: Gates) -> Registry:
    async def held(context: JobContext, step: int = 0) -> None:
        context.set_progress({"step": step})
        await gates.wait(context.job_id)

    async def flaky(context: JobContext) -> None:
        raise RuntimeError(f"attempt {context.attempt} failed")

    registry = Registry()
    for queue in (A, B):
        registry.register(JobHandler(f"held_{queue}", held, queue=queue, takes_context=True))
    registry.register(JobHandler("flaky", flaky, queue=A, takes_context=True))
    return registry


def _admin() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


@pytest.mark.django_db(transaction=True)
def test_running_now__per_worker_and_per_queue__matches_the_running_rows(gates: Gates) -> None:
    client = _admin()
    with running_worker(make_config([A, B]), registry=_registry(gates)):
        jobs = [Job.objects.enqueue(f"held_{q}", {"step": n}, queue=q) for n, q in enumerate([A, A, B])]
        wait_until(lambda: Job.objects.filter(state="running").count() == 3, what="three running jobs")
        wait_until(lambda: Job.objects.filter(state="running", progress__isnull=False).count() == 3, what="progress")
        worker = wait_until(WorkerInstance.objects.first, what="the worker's snapshot row")
        name = str(worker)
        assert name == f"{socket.gethostname()}:{worker.pid}"
        rows = {job.pk: job for job in Job.objects.filter(state="running")}
        assert {row.attempted_by for row in rows.values()} == {name}

        everything = client.get(reverse("admin:awa_job_running_data")).json()
        mine = client.get(reverse("admin:awa_job_running_data"), {"worker": name}).json()
        queue_a = client.get(reverse("admin:awa_job_running_data"), {"queue": A}).json()
        other = client.get(reverse("admin:awa_job_running_data"), {"worker": "elsewhere:1"}).json()
        page = client.get(reverse("admin:awa_job_running"), {"worker": name}).content.decode()
        dashboard = client.get(reverse("admin:awa_dashboard")).content.decode()

        ids = [j.pk for j in jobs]
        assert [j["id"] for j in everything["jobs"]] == sorted(ids, key=lambda pk: (rows[pk].attempted_at, pk))
        assert {j["id"] for j in mine["jobs"]} == set(ids)
        assert {j["id"] for j in queue_a["jobs"]} == {jobs[0].pk, jobs[1].pk}
        assert other["jobs"] == []
        for shown in everything["jobs"]:
            row = rows[shown["id"]]
            assert (shown["kind"], shown["queue"], shown["worker"]) == (row.kind, row.queue, name)
            assert row.attempted_at is not None and shown["started_at"] == row.attempted_at.isoformat()
            assert shown["elapsed_seconds"] >= 0
            assert shown["progress"] == row.progress == {"step": row.args["step"]}
        for job in jobs:
            assert f'data-job="{job.pk}"' in page
        assert "3 jobs running" in page
        # The dashboard's worker row and queue rows link here.
        assert f"?worker={name.replace(':', '%3A')}" in dashboard
        assert f"?queue={A}" in dashboard
        gates.open_all()


@pytest.mark.django_db(transaction=True)
def test_attempt_history__an_error_entry_names_its_worker_and_start(gates: Gates) -> None:
    with running_worker(make_config([A]), registry=_registry(gates)):
        job = Job.objects.enqueue("flaky", queue=A, max_attempts=1)
        failed = wait_until(lambda: Job.objects.filter(pk=job.pk, state="failed").first(), what="the failure")
        worker = str(wait_until(WorkerInstance.objects.first, what="the worker's row"))
    [entry] = failed.errors
    assert entry["worker"] == failed.attempted_by == worker
    assert entry["started_at"] is not None
    assert entry["started_at"][:19] == failed.attempted_at.isoformat()[:19]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [{"worker": "\x00"}, {"queue": "a\x00b"}, {"worker": "x" * 5000}, {"queue": " "}, {"worker": "'; DROP"}],
)
def test_running_now__odd_filters__an_empty_list_never_a_500(query: dict[str, str]) -> None:
    JobFactory(state="running", attempted_by="box:1", queue="q")
    client = _admin()
    page = client.get(reverse("admin:awa_job_running"), query)
    data = client.get(reverse("admin:awa_job_running_data"), query)
    assert page.status_code == data.status_code == 200
    expected: list[Any] = [] if query != {"queue": " "} else [j.pk for j in Job.objects.all()]
    assert [j["id"] for j in data.json()["jobs"]] == expected


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_running_now__matrix(users: dict[str, User | None], who: str) -> None:
    JobFactory(state="running", attempted_by="box:1")
    client = client_for(users[who])
    page = client.get(reverse("admin:awa_job_running"))
    data = client.get(reverse("admin:awa_job_running_data"))
    if who in ("superuser", "change_staff", "view_staff"):
        assert page.status_code == data.status_code == 200
        assert len(data.json()["jobs"]) == 1
    else:
        assert page.status_code == data.status_code == 302
        assert page["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_running_now__staff_without_the_job_view_permission_is_refused() -> None:
    client = client_for(User.objects.create_user("other", password=None, is_staff=True))
    assert client.get(reverse("admin:awa_job_running")).status_code == 403
    assert client.get(reverse("admin:awa_job_running_data")).status_code == 403
