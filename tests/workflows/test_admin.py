"""The workflow admin: the list with its jobs' progress, the detail page's SVG graph (each node a
link to its job, states coloured), its Cancel / Retry buttons, and the job page's links."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from awa_django.models import Job
from awa_django.testing import run_jobs
from awa_django.workflows import Workflow, always
from awa_django.workflows.layout import layout
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


def _workflow() -> Workflow:
    wf = Workflow("admin-graph")
    a = wf.add("wf.value", {"value": 1}, name="a")
    b = wf.add("wf.fail", name="b", after=[a])
    wf.add("wf.value", name="c", after=[b])
    wf.add("wf.value", name="d", after=[always(b)])
    return wf.enqueue()


def test_layout__every_edge_points_right_and_nodes_do_not_overlap() -> None:
    rows = [(i, f"k{i}", "waiting") for i in range(1, 8)]
    edges = [(1, 2, 0), (1, 3, 1), (2, 4, 0), (3, 4, 0), (4, 5, 0), (1, 6, 0)]

    graph = layout(rows, edges)

    nodes = {n.id: n for n in graph.nodes}
    for up, down, _ in edges:
        assert nodes[up].x < nodes[down].x
    boxes = {(n.x, n.y) for n in graph.nodes}
    assert len(boxes) == len(rows)
    assert all(n.x + n.width <= graph.width and n.y + n.height <= graph.height for n in graph.nodes)
    assert [line.always for line in graph.lines] == [False, True, False, False, False, False]


def test_workflow_list__shows_progress(client: Client) -> None:
    wf = _workflow()
    run_jobs(raise_on_failure=False)

    page = client.get(reverse("admin:awa_workflow_changelist")).content.decode()

    assert "admin-graph" in page
    assert "2 of 4 completed, 2 failed or cancelled" in page  # a and d completed; b failed, c cancelled
    assert wf.id is not None


def test_workflow_detail__draws_each_job_as_a_linked_coloured_node(client: Client) -> None:
    wf = _workflow()
    run_jobs(raise_on_failure=False)

    page = client.get(reverse("admin:awa_workflow_change", args=[wf.id])).content.decode()

    for s in wf.steps:
        assert reverse("admin:awa_job_change", args=[s.id]) in page
    assert len(re.findall(r'class="awa-node awa-node-completed"', page)) == 2
    assert 'class="awa-node awa-node-failed"' in page
    assert 'class="awa-node awa-node-cancelled"' in page
    assert page.count('class="awa-edge awa-edge-always"') == 1
    assert page.count('class="awa-edge"') == 2


def test_workflow_buttons__cancel_then_retry_run_it_again_in_order(client: Client) -> None:
    wf = Workflow("buttons")
    a = wf.add("wf.value", {"value": 1}, name="a")
    b = wf.add("wf.value", {"value": 2}, name="b", after=[a])
    wf.enqueue()

    client.post(reverse("admin:awa_workflow_act", args=[wf.id, "cancel"]))
    assert {Job.objects.get(pk=s.id).state for s in wf.steps} == {"cancelled"}

    client.post(reverse("admin:awa_workflow_act", args=[wf.id, "retry"]))
    assert [Job.objects.get(pk=s.id).state for s in (a, b)] == ["available", "waiting"]
    assert [run.job_id for run in run_jobs()] == [a.id, b.id]


def test_job_detail__links_to_its_workflow_and_neighbours(client: Client) -> None:
    wf = _workflow()
    b = wf.steps[1]

    page = client.get(reverse("admin:awa_job_change", args=[b.id])).content.decode()

    assert reverse("admin:awa_workflow_change", args=[wf.id]) in page
    assert f"a #{wf.steps[0].id}" in page
    for s in wf.steps[2:]:
        assert reverse("admin:awa_job_change", args=[s.id]) in page
