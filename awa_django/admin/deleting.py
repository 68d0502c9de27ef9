"""What deleting jobs does to their workflows: the admin's delete confirmations (the Job list's
"Delete selected jobs", a failure group's "Delete this group", "Delete all matching…" and a job's
own Delete page) name each workflow step among the jobs, its workflow, and what the deletion does
to the workflow's other jobs.

Deleting goes through ``discard_jobs``: a step that has not ended counts, for the jobs that wait
on it, as cancelled, in the same transaction (``release_ended_jobs``): a dependent on an
``on_success`` edge is cancelled (and the jobs that wait on it in turn), one on an ``always`` edge
stops waiting for it, one on an ``on_discard`` edge runs now. A step that has ended released its
dependents then: deleting it changes no other job, but its workflow loses it (the graph no longer
shows it, and the workflow's Retry cannot run it again).

Bounded reads: at most ``STEPS_SHOWN`` steps through the partial ``awa_job_workflow_idx``, their
workflows, their out-edges (the primary key of ``awa_job_edge``, upstream first) and those edges'
jobs by primary key; never a read of the jobs outside a workflow.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Count
from django.template.response import TemplateResponse

from awa_django.admin.helpers import COUNT_LIMIT
from awa_django.models import EdgePolicy, Job, JobEdge, JobState, Workflow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from django.contrib import admin
    from django.db.models import QuerySet
    from django.http import HttpRequest

STEPS_SHOWN = 20  # workflow steps named on one confirmation; more are counted as "and more"
DEPENDENTS_READ = 500  # out-edges read for the shown steps (a wide fan-out is summed, not listed)

# What a waiting dependent does when the job it waits on is deleted before it ended (read as a cancel).
_OUTCOME = {
    EdgePolicy.ON_SUCCESS: "cancelled (its on_success edge needs this job to complete), and the jobs waiting on it",
    EdgePolicy.ALWAYS: "stops waiting for this job (always edge)",
    EdgePolicy.ON_DISCARD: "runs now (its on_discard edge fires when this job is cancelled)",
}


@dataclass(frozen=True)
class Dependent:
    """A job that waits on a step being deleted, and what the deletion does to it."""

    id: int
    kind: str
    state: str
    outcome: str


@dataclass(frozen=True)
class WorkflowStep:
    """A job being deleted that belongs to a workflow."""

    id: int
    kind: str
    state: str
    step: str | None  # the step's name in its workflow (stored on its out-edges: None for a last step)
    workflow_id: int
    workflow: str  # the workflow's name
    others: int  # the workflow's jobs that this deletion keeps
    effect: str  # what deleting it does to the workflow's other jobs, in words
    dependents: tuple[Dependent, ...]  # the jobs that wait on it, when it has not ended
    more_dependents: int  # dependents not listed (past DEPENDENTS_READ)


@dataclass(frozen=True)
class WorkflowImpact:
    steps: tuple[WorkflowStep, ...]
    more: bool  # more workflow steps are deleted than ``steps`` names


SAMPLE = 10  # jobs listed on a confirmation, by id


def confirm_delete(
    model_admin: admin.ModelAdmin[Job],
    request: HttpRequest,
    jobs: QuerySet[Job],
    *,
    hidden: Sequence[tuple[str, str]],
    post_url: str = "",
    what: str = "",
) -> TemplateResponse:
    """The confirmation page before ``jobs`` are deleted: how many (counted up to COUNT_LIMIT), the
    first SAMPLE, the workflow steps among them, and a form that posts ``hidden`` and ``post=yes``
    to ``post_url`` (empty: the page's own URL, as an admin action's confirmation)."""
    jobs = jobs.order_by()
    counted = int(jobs[: COUNT_LIMIT + 1].count())
    request.current_app = model_admin.admin_site.name
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Delete jobs",
        "subtitle": None,
        "opts": model_admin.opts,
        "media": model_admin.media,
        "awa_count": min(counted, COUNT_LIMIT),
        "awa_count_capped": counted > COUNT_LIMIT,
        "awa_what": what,
        "awa_sample": list(jobs.order_by("pk").only("id", "kind", "queue", "state")[:SAMPLE]),
        "awa_impact": workflow_impact(jobs),
        "awa_hidden": list(hidden),
        "awa_post_url": post_url,
    }
    return TemplateResponse(request, "admin/awa/job/delete_jobs.html", context)


def workflow_impact(jobs: QuerySet[Job]) -> WorkflowImpact:
    """The workflow steps among ``jobs`` (the jobs a confirmation is about to delete), at most
    STEPS_SHOWN of them, by workflow and id, each with what its deletion does to its workflow."""
    rows = list(
        jobs.filter(workflow__isnull=False)
        .order_by("workflow_id", "pk")  # awa_job_workflow_idx's order: an index scan, stopped at the limit
        .values_list("pk", "kind", "state", "workflow_id")[: STEPS_SHOWN + 1]
    )
    if not rows:
        return WorkflowImpact((), False)
    more, rows = len(rows) > STEPS_SHOWN, rows[:STEPS_SHOWN]
    ids = [row[0] for row in rows]
    workflow_ids = sorted({row[3] for row in rows})
    names = dict(Workflow.objects.filter(pk__in=workflow_ids).values_list("pk", "name"))
    sizes = _per_workflow(Job.objects.filter(workflow_id__in=workflow_ids))
    deleted = _per_workflow(jobs.filter(workflow_id__in=workflow_ids))
    step_names = dict(
        JobEdge.objects.filter(upstream_id__in=ids).order_by("upstream_id").distinct("upstream_id")
        .values_list("upstream_id", "name")
    )  # fmt: skip
    dependents, more_dependents = _dependents(jobs, [row[0] for row in rows if not JobState(row[2]).is_terminal])
    steps = []
    for job_id, kind, state, workflow_id in rows:
        ended = JobState(state).is_terminal
        listed = dependents.get(job_id, ())
        steps.append(
            WorkflowStep(
                id=job_id,
                kind=kind,
                state=state,
                step=step_names.get(job_id),
                workflow_id=workflow_id,
                workflow=names.get(workflow_id, "(workflow row gone)"),
                others=sizes.get(workflow_id, 0) - deleted.get(workflow_id, 0),
                effect=_effect(ended, len(listed) + more_dependents.get(job_id, 0)),
                dependents=tuple(listed),
                more_dependents=more_dependents.get(job_id, 0),
            )
        )
    return WorkflowImpact(tuple(steps), more)


def _per_workflow(jobs: QuerySet[Job]) -> dict[int, int]:
    return dict(jobs.order_by().values("workflow_id").annotate(n=Count("pk")).values_list("workflow_id", "n"))


def _effect(ended: bool, after: int) -> str:
    if ended:
        return (
            "it has ended, so no other job of the workflow changes; the workflow loses the step "
            "(its graph no longer shows it, and the workflow's Retry cannot run it again)"
        )
    if not after:
        return "it has not ended; no job waits on it, so no other job of the workflow changes"
    return f"it has not ended: for the {after} job(s) after it, deleting it counts as a cancel"


def _dependents(jobs: QuerySet[Job], unfinished: list[int]) -> tuple[dict[int, list[Dependent]], dict[int, int]]:
    """The waiting jobs on the out-edges of the unfinished steps (at most DEPENDENTS_READ edges),
    each with its outcome, and per step how many were not read."""
    if not unfinished:
        return {}, {}
    edges = list(
        JobEdge.objects.filter(upstream_id__in=unfinished)
        .order_by("upstream_id", "downstream_id")
        .values_list("upstream_id", "downstream_id", "policy")[:DEPENDENTS_READ]
    )
    totals = dict(
        JobEdge.objects.filter(upstream_id__in=unfinished).order_by().values("upstream_id")
        .annotate(n=Count("downstream_id")).values_list("upstream_id", "n")
    )  # fmt: skip
    downstream = sorted({edge[1] for edge in edges})
    found_rows = Job.objects.filter(pk__in=downstream).values_list("pk", "kind", "state")
    rows = {pk: (kind, state) for pk, kind, state in found_rows}
    deleted_too = set(jobs.filter(pk__in=downstream).values_list("pk", flat=True))
    found: dict[int, list[Dependent]] = defaultdict(list)
    for upstream, job_id, policy in edges:
        kind, state = rows.get(job_id, ("(deleted)", ""))
        if job_id in deleted_too:
            outcome = "deleted too"
        elif state != JobState.WAITING:
            outcome = f"unchanged ({state or 'gone'}: not waiting any more)"
        else:
            outcome = _OUTCOME[EdgePolicy(policy)]
        found[upstream].append(Dependent(job_id, kind, state, outcome))
    more = {upstream: total - len(found.get(upstream, ())) for upstream, total in totals.items()}
    return dict(found), {upstream: n for upstream, n in more.items() if n > 0}
