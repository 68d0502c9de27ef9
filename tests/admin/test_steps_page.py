"""A durable job's admin page: its steps as a timeline (name, kind, attempt, started, duration,
result preview escaped and cut), the sleep or wait in force, a cancelled parked job saying so, the
"Restart from step" button, and the job list's filter of sleeping and waiting jobs."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from awa_django.admin.steps import PREVIEW_LENGTH, preview
from awa_django.models import Job, JobStep
from awa_django.services.jobs import cancel_jobs
from awa_django.worker import JobContext
from tests.admin.conftest import client_for, messages_of
from tests.durable.support import expire, registry_of, run_once, steps_of

pytestmark = pytest.mark.django_db
QUEUE = "steps-page"
LONG = "x" * 500


def _durable(context: JobContext) -> Any:
    context.step("charge", lambda: {"html": "<script>alert(1)</script>", "long": LONG})
    context.sleep(3600)
    return context.wait_for("approved", timeout=context.metadata.get("timeout"))


REGISTRY = registry_of("steps.durable", _durable, queue=QUEUE)


def sleeping() -> Job:
    job = Job.objects.enqueue("steps.durable", {}, queue=QUEUE)
    assert run_once(job.id, REGISTRY).state == "scheduled"  # type: ignore[union-attr]
    return job


def waiting(timeout: int | None = None) -> Job:
    job = Job.objects.enqueue("steps.durable", {}, queue=QUEUE, metadata={"timeout": timeout})
    run_once(job.id, REGISTRY)
    expire(job.id)
    run_once(job.id, REGISTRY)
    return job


def page(client: Client, job: Job) -> str:
    response = client.get(reverse("admin:awa_job_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_job_page__steps_in_start_order_with_kind_attempt_and_an_escaped_cut_result(admin_client: Client) -> None:
    html = page(admin_client, sleeping())

    rows = html.split('<tr class="awa-step" data-step="')[1:]
    assert [row.split('"', 1)[0] for row in rows] == ["charge", "sleep#1"]
    charge = rows[0]
    assert "<td>step</td>" in charge and '<td class="num">1</td>' in charge
    assert "<script>" not in html.split('<table class="awa-table awa-steps">')[1]  # escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in charge
    assert "x" * PREVIEW_LENGTH not in charge and "…" in charge  # cut
    assert "<td>sleep</td>" in rows[1] and "in force" in rows[1]
    assert "sleeping in &#x27;sleep#1&#x27; until " in html


def test_job_page__a_waiting_job_shows_its_event_and_deadline_or_none(admin_client: Client) -> None:
    html = unescape(page(admin_client, waiting()))
    assert "waiting in 'wait:approved#1' for event 'approved', with no timeout" in html
    html = unescape(page(admin_client, waiting(timeout=600)))
    assert "waiting in 'wait:approved#1' for event 'approved', until " in html


def test_job_page__a_cancelled_parked_job_says_what_it_was_cancelled_in(admin_client: Client) -> None:
    job = waiting()
    cancel_jobs([job.pk], reason="by admin: no longer needed")

    html = unescape(page(admin_client, job))

    assert "cancelled while waiting in 'wait:approved#1' for event 'approved'" in html
    assert "cancelled in it" in html
    sleeper = sleeping()
    cancel_jobs([sleeper.pk])
    assert "cancelled while sleeping in 'sleep#1' until " in unescape(page(admin_client, sleeper))


def test_job_page__a_job_without_steps_has_no_steps_section(admin_client: Client) -> None:
    job = Job.objects.enqueue("plain", queue=QUEUE)
    html = page(admin_client, job)
    assert "awa-steps" not in html and "Restart from step" not in html


def test_preview__json_cut_to_its_length() -> None:
    assert preview({"a": [1, "é"]}) == '{"a": [1, "é"]}'
    assert len(preview(LONG)) == PREVIEW_LENGTH and preview(LONG).endswith("…")


def test_restart_button__forgets_the_step_and_after_and_says_so(admin_client: Client) -> None:
    job = waiting()
    html = page(admin_client, job)
    assert 'name="step"' in html and "Restart from step" in html

    restart = reverse("admin:awa_job_act", args=[job.pk, "restart"])
    response = admin_client.post(restart, {"step": "sleep#1"}, follow=True)

    assert messages_of(response) == [
        f"Job {job.pk}: restarted from step 'sleep#1', forgetting 2 step(s) (sleep#1, wait:approved#1); "
        "it runs again now."
    ]
    assert set(steps_of(job.id)) == {"charge"}
    assert Job.objects.get(pk=job.pk).state == "available"
    assert "restarted: from step &#x27;sleep#1&#x27; by admin" in response.content.decode()
    assert "<td>restarted</td>" in response.content.decode()  # the attempts table names it


def test_restart_button__a_running_job_is_refused_with_a_message(admin_client: Client) -> None:
    job = sleeping()
    Job.objects.filter(pk=job.pk).update(state="running")
    assert "Restart from step" not in page(admin_client, job)  # not offered while it runs

    restart = reverse("admin:awa_job_act", args=[job.pk, "restart"])
    response = admin_client.post(restart, {"step": "charge"}, follow=True)

    assert messages_of(response) == [
        f"cannot restart job {job.pk} from step 'charge': it is running; cancel it, or wait for it to finish "
        "or park, then restart it"
    ]
    assert JobStep.objects.filter(job_id=job.pk).count() == 2


@pytest.mark.parametrize("step", ["", "nope", "a\x00b", "💥" * 300])
def test_restart_button__an_unknown_step_is_an_error_message(admin_client: Client, step: str) -> None:
    job = sleeping()
    response = admin_client.post(reverse("admin:awa_job_act", args=[job.pk, "restart"]), {"step": step}, follow=True)
    [message] = messages_of(response)
    assert f"cannot restart job {job.pk} from step " in message and "it has no step of that name" in message
    assert JobStep.objects.filter(job_id=job.pk).count() == 2


def test_restart_button__view_only_staff_may_not(users: dict[str, Any]) -> None:
    job = sleeping()
    response = client_for(users["view_staff"]).post(
        reverse("admin:awa_job_act", args=[job.pk, "restart"]), {"step": "charge"}
    )
    assert response.status_code == 403
    assert JobStep.objects.filter(job_id=job.pk).count() == 2


def test_job_list__filters_sleeping_and_waiting_jobs(admin_client: Client) -> None:
    asleep, parked, timed = sleeping(), waiting(), waiting(timeout=600)
    plain = Job.objects.enqueue("plain", queue=QUEUE)

    def listed(value: str) -> set[int]:
        response = admin_client.get(reverse("admin:awa_job_changelist") + f"?parked={value}")
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    assert listed("sleeping") == {asleep.pk}
    assert listed("waiting") == {parked.pk, timed.pk}
    assert listed("any") == {asleep.pk, parked.pk, timed.pk}
    assert plain.pk not in listed("any") and listed("bogus") == set()
