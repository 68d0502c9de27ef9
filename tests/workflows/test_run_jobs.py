"""Workflows under run_jobs and immediate mode: steps run in dependency order on the test's own
connection, release happens in the write of each upstream's outcome, results pass by name."""

from __future__ import annotations

import pytest
from django.test import override_settings

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job
from awa_django.testing import run_jobs
from awa_django.workflows import Batch, Workflow, always, chain, chord, group, step
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def states(workflow: Workflow) -> dict[str, str]:
    return {s.name: Job.objects.get(pk=s.id).state for s in workflow.steps}


def test_workflow__dependents_wait_then_run_after_their_upstreams_with_their_results() -> None:
    wf = Workflow("import-42")
    a = wf.add("wf.value", {"value": 2}, name="a")
    b = wf.add("wf.value", {"value": 3}, name="b", after=[a])
    c = wf.add("wf.sum", name="c", after=[a, b])
    wf.enqueue()

    assert states(wf) == {"a": "available", "b": "waiting", "c": "waiting"}
    assert Job.objects.get(pk=c.id).pending == 2

    report = run_jobs()

    assert [run.job_id for run in report] == [a.id, b.id, c.id]
    assert Job.objects.get(pk=c.id).result == 5
    assert set(states(wf).values()) == {"completed"}


def test_workflow__a_failed_upstream_cancels_on_success_dependents_and_runs_always_ones() -> None:
    wf = Workflow("fails")
    bad = wf.add("wf.fail", name="bad")
    nxt = wf.add("wf.value", {"value": 1}, name="next", after=[bad])
    after_next = wf.add("wf.value", {"value": 1}, name="after_next", after=[nxt])
    final = wf.add("wf.value", {"value": 9}, name="finally", after=[always(bad)])
    wf.enqueue()

    run_jobs(raise_on_failure=False)

    assert states(wf) == {"bad": "failed", "next": "cancelled", "after_next": "cancelled", "finally": "completed"}
    error = Job.objects.get(pk=nxt.id).errors[-1]["error"]
    assert f"upstream job {bad.id} (bad) ended failed" in error
    assert f"upstream job {nxt.id} (next) ended cancelled" in Job.objects.get(pk=after_next.id).errors[-1]["error"]
    assert Job.objects.get(pk=final.id).result == 9


def test_canvas__chain_group_chord_run_in_order_and_the_chord_body_sums_its_header() -> None:
    wf = Workflow("canvas")
    [body] = wf.extend(
        chain(
            step("wf.value", {"value": 1}, name="first"),
            chord(group(*(step("wf.value", {"value": i}, name=f"part{i}") for i in range(4))), step("wf.sum")),
        )
    )
    wf.enqueue()

    report = run_jobs()

    assert report[0].job_id == wf.steps[0].id
    assert report[-1].job_id == body.id
    assert Job.objects.get(pk=body.id).result == 0 + 1 + 2 + 3


def test_batch__on_success_and_on_finish_callbacks() -> None:
    batch = Batch("nightly", on_success=step("wf.sum", name="ok"), on_finish=step("wf.sum", name="done"))
    for i in range(3):
        batch.add("wf.value", {"value": i + 1}, name="member")
    batch.enqueue()

    run_jobs()

    assert states(batch) == {"member": "completed", "ok": "completed", "done": "completed"}
    assert Job.objects.get(pk=batch.steps[-1].id).result == 6


def test_workflow__depends_on_an_existing_job_by_id() -> None:
    existing = Job.objects.enqueue("wf.value", {"value": 7})
    wf = Workflow("by-id")
    echo = wf.add("wf.echo", {"name": "wf.value"}, after=[existing.pk])
    wf.enqueue()

    assert Job.objects.get(pk=echo.id).state == "waiting"
    run_jobs()
    assert Job.objects.get(pk=echo.id).result == 7


def test_workflow__an_on_success_edge_to_a_failed_job_is_refused_before_writing() -> None:
    failed = Job.objects.enqueue("wf.fail")
    run_jobs(raise_on_failure=False)
    wf = Workflow("late")
    wf.add("wf.value", after=[failed.pk])

    with pytest.raises(InvalidJobError, match=rf"waits for job {failed.pk} to complete, but it is failed already"):
        wf.enqueue()
    assert Job.objects.count() == 1


def test_workflow__an_unknown_upstream_id_is_refused() -> None:
    wf = Workflow("unknown")
    wf.add("wf.value", after=[987654321])

    with pytest.raises(InvalidJobError, match="waits for job 987654321, which does not exist"):
        wf.enqueue()
    assert Job.objects.count() == 0


def test_workflow__a_cycle_is_refused_naming_its_steps() -> None:
    wf = Workflow("cycle")
    a = wf.add("wf.value", name="a")
    b = wf.add("wf.value", name="b", after=[a])
    c = wf.add("wf.value", name="c", after=[b])
    a.after(c)

    with pytest.raises(InvalidJobError, match=r"'a' -> 'b' -> 'c' -> 'a'.*cycle"):
        wf.enqueue()
    assert Job.objects.count() == 0


def test_dynamic_fan_out__the_fan_in_waits_for_the_added_steps() -> None:
    wf = Workflow("dynamic")
    split = wf.add("wf.split", {"n": 3}, name="split")
    total = wf.add("wf.sum", name="total", after=[split])
    wf.enqueue()

    run_jobs()

    # split's result (3) plus the parts 0 + 1 + 2
    assert Job.objects.get(pk=total.id).result == 6
    assert wf.id is not None
    assert Job.objects.filter(workflow_id=wf.id).count() == 5


@pytest.mark.django_db(transaction=True)
@override_settings(AWA={"EXECUTION": "immediate"})
def test_immediate_mode__runs_a_workflow_in_dependency_order_dynamic_steps_included() -> None:
    wf = Workflow("immediate")
    split = wf.add("wf.split", {"n": 2}, name="split")
    total = wf.add("wf.sum", name="total", after=[split])
    wf.enqueue()

    assert Job.objects.get(pk=split.id).state == "completed"
    assert Job.objects.get(pk=total.id).result == 2 + 0 + 1
