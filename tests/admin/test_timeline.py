"""A job's life on one page: one row per attempt (start and end to the second in the operator's
time zone, how long, which worker, the outcome, the error), and the reason a cancel recorded."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from awa_django.context import JobContext
from awa_django.models import Job, WorkerInstance
from awa_django.registry import JobHandler, Registry
from awa_django.retry import policy
from awa_django.services.jobs import cancel_jobs
from tests.harness import make_config, running_worker, wait_until

QUEUE = "timeline"


@pytest.mark.django_db(transaction=True)
def test_timeline__each_attempt_with_its_worker_times_and_outcome(django_user_model: object) -> None:
    async def flaky(context: JobContext) -> None:
        if context.attempt == 1:
            raise RuntimeError("first attempt fails")

    registry = Registry()
    registry.register(
        JobHandler("flaky", flaky, queue=QUEUE, takes_context=True, retry=policy("flaky", backoff=lambda attempt: 0.0))
    )
    with running_worker(make_config([QUEUE]), registry=registry):
        job = Job.objects.enqueue("flaky", queue=QUEUE, max_attempts=3)
        done = wait_until(lambda: Job.objects.filter(pk=job.pk, state="completed").first(), what="completion")
        worker = str(wait_until(WorkerInstance.objects.first, what="the worker's row"))
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password=None))  # type: ignore[attr-defined]
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        html = client.get(reverse("admin:awa_job_change", args=[done.pk])).content.decode()
    rows = re.findall(r'<tr class="awa-attempt" data-attempt="(\d+)">(.*?)</tr>', html, re.S)
    assert [n for n, _ in rows] == ["1", "2"]
    first, second = (re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for _, row in rows)
    assert first[4:6] == [worker, "error"] and "first attempt fails" in first[6]
    assert second[4:6] == [worker, "completed"]
    tokyo = done.attempted_at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M:%S JST")
    assert second[1] == tokyo  # to the second, in the operator's time zone
    assert done.finalized_at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%H:%M:%S") in second[2]


@pytest.mark.django_db
def test_cancel__the_reason_is_recorded_and_shown(admin_client: Client) -> None:
    job = Job.objects.enqueue("k", queue=QUEUE)
    response = admin_client.post(reverse("admin:awa_job_act", args=[job.pk, "cancel"]), {"reason": "customer left"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert job.errors[-1]["error"] == "cancelled: by admin: customer left"
    html = admin_client.get(reverse("admin:awa_job_change", args=[job.pk])).content.decode()
    assert "cancelled: by admin: customer left" in html
    other = Job.objects.enqueue("k", queue=QUEUE)
    assert cancel_jobs([other.pk]) == 1
    assert Job.objects.get(pk=other.pk).errors == []  # no reason given: nothing added
    third = Job.objects.enqueue("k", queue=QUEUE)
    assert cancel_jobs([third.pk], reason="x" * 2000) == 1
    assert len(Job.objects.get(pk=third.pk).errors[-1]["error"]) == len("cancelled: ") + 500
