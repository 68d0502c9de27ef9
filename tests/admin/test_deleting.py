"""Deleting jobs in the admin: one word ("Delete") for it, and every way to delete (the selection's
action, a failure group, "Delete all matching…", a job's own page) first shows a confirmation that
names the workflow steps among the jobs, their workflow, and what happens to its other jobs."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from awa_django.admin.deleting import STEPS_SHOWN, workflow_impact
from awa_django.models import Job
from awa_django.services.failures import failure_groups
from awa_django.testing import run_jobs
from awa_django.workflows import Upstream, Workflow, always
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db

LIST = "/admin/awa/job/"


def _checkout() -> dict[str, int]:
    """charge, then ship (on_success), notify (always) and refund (on_discard) after it; the ids by step."""
    wf = Workflow("checkout")
    charge = wf.add("wf.value", {"value": 1}, name="charge")
    wf.add("wf.value", name="ship", after=[charge])
    wf.add("wf.value", name="notify", after=[always(charge)])
    wf.add("wf.value", name="refund", after=[Upstream(charge, "on_discard")])
    wf.enqueue()
    return {step.name: step.id for step in wf.steps}


def _step_item(page: str, job_id: int) -> str:
    item = rf'<li class="awa-delete-step" data-job="{job_id}".*?(?=<li class="awa-delete-step"|</div>)'
    found = re.search(item, page, re.S)
    assert found, f"job {job_id} is not named as a workflow step on the confirmation"
    return found.group(0)


def test_job_list__offers_delete_selected_and_never_the_word_discard(admin_client: Client) -> None:
    Job.objects.enqueue("k")
    page = admin_client.get(LIST).content.decode()

    assert '<option value="delete_selected">Delete selected jobs</option>' in page
    assert 'id="awa-bulk-delete"' in page and "Delete all matching…" in page
    assert "discard" not in page.lower()


def test_delete_selected__a_selection_with_a_workflow_step_lists_the_step_before_deleting(
    admin_client: Client,
) -> None:
    steps = _checkout()
    plain = Job.objects.enqueue("k")

    confirm = admin_client.post(LIST, {"action": "delete_selected", "_selected_action": [steps["charge"], plain.pk]})

    assert confirm.status_code == 200  # a confirmation; nothing deleted yet
    assert Job.objects.filter(pk__in=[steps["charge"], plain.pk]).count() == 2
    page = confirm.content.decode()
    assert "Delete <strong>2</strong> jobs?" in page
    item = _step_item(page, steps["charge"])
    assert "step <strong>charge</strong> of workflow" in item and "checkout #" in item
    assert "The workflow keeps 3 other jobs." in item
    assert "counts as a cancel" in item
    outcomes = dict(re.findall(r'data-dependent="(\d+)">.*?\): ([^<]*)</li>', item))
    assert outcomes[str(steps["ship"])].startswith("cancelled (its on_success edge")
    assert outcomes[str(steps["notify"])].startswith("stops waiting for this job")
    assert outcomes[str(steps["refund"])].startswith("runs now")
    assert f'data-job="{plain.pk}"' in page and f'data-job="{plain.pk}" data-workflow' not in page

    done = admin_client.post(
        LIST, {"action": "delete_selected", "_selected_action": [steps["charge"], plain.pk], "post": "yes"}
    )

    assert done.status_code == 302
    assert not Job.objects.filter(pk__in=[steps["charge"], plain.pk]).exists()
    states = dict(Job.objects.values_list("pk", "state"))
    assert states == {steps["ship"]: "cancelled", steps["notify"]: "available", steps["refund"]: "available"}


def test_delete_selected__a_dependent_in_the_selection_is_said_to_be_deleted_too(admin_client: Client) -> None:
    steps = _checkout()

    page = admin_client.post(
        LIST, {"action": "delete_selected", "_selected_action": [steps["charge"], steps["ship"]]}
    ).content.decode()

    item = _step_item(page, steps["charge"])
    assert re.search(rf'data-dependent="{steps["ship"]}">.*?: deleted too</li>', item)
    assert "The workflow keeps 2 other jobs." in item


def test_delete_selected__select_across_confirms_then_deletes_every_matching_job(admin_client: Client) -> None:
    kept = Job.objects.enqueue("k", queue="elsewhere")
    doomed = [Job.objects.enqueue("k", queue="bulk").pk for _ in range(3)]
    url = f"{LIST}?{urlencode({'queue': 'bulk'})}"
    posted = {"action": "delete_selected", "_selected_action": [doomed[0]], "select_across": "1", "index": "0"}

    page = admin_client.post(url, posted).content.decode()

    assert "Delete <strong>3</strong> jobs?" in page
    assert '<input type="hidden" name="select_across" value="1">' in page
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page))
    admin_client.post(url, {**hidden, "post": "yes"})
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]


def test_failure_group_delete__confirms_naming_the_failed_workflow_step(admin_client: Client) -> None:
    wf = Workflow("payout")
    fails = wf.add("wf.fail", name="transfer")
    wf.add("wf.value", name="receipt", after=[fails])
    wf.enqueue()
    run_jobs(raise_on_failure=False)
    group = next(g for g in failure_groups().groups if g.kind == "wf.fail")

    confirm = admin_client.post(reverse("admin:awa_job_failures_act"), {"group": group.key, "action": "delete"})

    assert confirm.status_code == 200 and Job.objects.filter(pk=fails.id).exists()
    item = _step_item(confirm.content.decode(), fails.id)
    assert "step <strong>transfer</strong> of workflow" in item and "payout #" in item
    assert "It has ended, so no other job of the workflow changes" in item
    admin_client.post(reverse("admin:awa_job_failures_act"), {"group": group.key, "action": "delete", "post": "yes"})
    assert not Job.objects.filter(pk=fails.id).exists()


def test_bulk_delete_preview__names_the_workflow_steps_it_matches(admin_client: Client) -> None:
    steps = _checkout()
    query = urlencode({"kind": "wf.value", "state__exact": "available"})
    url = reverse("admin:awa_job_bulk", args=["delete"]) + "?" + query

    page = admin_client.get(url).content.decode()

    assert "step <strong>charge</strong> of workflow" in _step_item(page, steps["charge"])


def test_job_delete_page__names_its_workflow(admin_client: Client) -> None:
    steps = _checkout()

    page = admin_client.get(reverse("admin:awa_job_delete", args=[steps["ship"]])).content.decode()

    item = _step_item(page, steps["ship"])
    assert "a step of workflow" in item and "checkout #" in item  # a last step's name is not stored: no edge leaves it
    assert "no job waits on it, so no other job of the workflow changes" in item


def test_workflow_impact__names_at_most_steps_shown_and_says_there_are_more() -> None:
    wf = Workflow("wide")
    for n in range(STEPS_SHOWN + 2):
        wf.add("wf.value", name=f"s{n}")
    wf.enqueue()

    impact = workflow_impact(Job.objects.all())

    assert len(impact.steps) == STEPS_SHOWN and impact.more
    assert {s.others for s in impact.steps} == {0}
    assert workflow_impact(Job.objects.filter(workflow__isnull=True)).steps == ()
