"""A durable job's steps on its admin page (docs/guide/durable-jobs.md): one line per step, sleep
and wait, in the order they started (name, kind, attempt, started, duration, result), and above
them what holds the job now: the sleep in force with its wake time, the wait in force with its
event and deadline, or, for a job cancelled while parked, the sleep or wait it was cancelled in.
Its "Restart from step" button (a choice of the job's steps) calls ``restart_from_step``.

Read from ``awa_job_step`` (the ``JobStep`` rows, one query, at most ``SHOWN_STEPS`` of them);
results are shown as JSON, escaped and cut to ``PREVIEW_LENGTH`` characters."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.admin.timeline import shown_duration, shown_time
from awa_django.exceptions import RestartError
from awa_django.models import Job, JobState, JobStep, StepKind
from awa_django.services.steps import restart_from_step

if TYPE_CHECKING:
    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin

PREVIEW_LENGTH = 120  # characters of a step's result shown in its line
SHOWN_STEPS = 500  # steps listed on the page at most (the oldest first)


@dataclass(frozen=True)
class InForce:
    """What holds a parked job: its sleep (until ``until``) or its wait (for ``event``, until
    ``until`` or a signal); ``cancelled``: the job was cancelled while held by it."""

    step: str
    kind: str
    until: datetime | None
    event: str
    cancelled: bool = False

    def describe(self) -> str:
        if self.kind == StepKind.SLEEP:
            text = f"sleeping in {self.step!r} until {shown_time(self.until)}"
        else:
            until = f"until {shown_time(self.until)}" if self.until is not None else "with no timeout"
            text = f"waiting in {self.step!r} for event {self.event!r}, {until}"
        return f"cancelled while {text}" if self.cancelled else text


def steps_of(job: Job) -> list[JobStep]:
    return list(JobStep.objects.filter(job_id=job.pk).order_by("started_at", "name")[:SHOWN_STEPS])


def in_force(job: Job, steps: list[JobStep], now: datetime | None = None) -> InForce | None:
    """The sleep or wait holding the job: a wait with no ``finished_at``, or a sleep whose wake
    time is to come (for a cancelled job: was to come when it was cancelled); None when nothing
    holds it (it runs, is due, or finished on its own)."""
    parked_states = (JobState.SCHEDULED, JobState.WAITING)
    cancelled = job.state == JobState.CANCELLED
    if job.state not in parked_states and not cancelled:
        return None
    moment = (job.finalized_at if cancelled else None) or now or timezone.now()
    for step in reversed(steps):  # the latest first: a job is held by the last one it reached
        if step.kind == StepKind.WAIT and step.finished_at is None:
            return InForce(step.name, step.kind, step.wake_at, step.event, cancelled)
        if step.kind == StepKind.SLEEP and step.wake_at is not None and step.wake_at > moment:
            if cancelled or job.state == JobState.SCHEDULED:
                return InForce(step.name, step.kind, step.wake_at, step.event, cancelled)
    return None


def preview(value: Any) -> str:
    """A result as one line of JSON, cut to ``PREVIEW_LENGTH`` characters (escaped when shown)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= PREVIEW_LENGTH else text[: PREVIEW_LENGTH - 1] + "…"


def _shown(step: JobStep, held: InForce | None) -> tuple[str, str, str]:
    """(duration, status, result) of one line."""
    holding = held is not None and held.step == step.name
    in_force = "cancelled in it" if held is not None and held.cancelled else "in force"
    if step.kind == StepKind.SLEEP:
        length = step.wake_at - step.started_at if step.wake_at else None
        return shown_duration(length), in_force if holding else "slept", f"until {shown_time(step.wake_at)}"
    if step.kind == StepKind.WAIT:
        if step.finished_at is None:
            until = f"until {shown_time(step.wake_at)}" if step.wake_at else "no timeout"
            return "—", in_force if holding else "not ended", f"for {step.event!r}, {until}"
        ran = step.finished_at - step.started_at
        if step.timed_out:
            return shown_duration(ran), "timed out", f"no {step.event!r} by {shown_time(step.wake_at)}"
        return shown_duration(ran), f"got {step.event!r}", preview(step.result)
    took = step.finished_at - step.started_at if step.finished_at else None
    return shown_duration(took), "done", preview(step.result)


def step_timeline(job: Job, steps: list[JobStep] | None = None) -> SafeString:
    steps = steps_of(job) if steps is None else steps
    if not steps:
        return format_html('<span class="awa-muted">{}</span>', "no steps recorded")
    held = in_force(job, steps)
    lines = []
    for step in steps:
        duration, status, result = _shown(step, held)
        started = shown_time(step.started_at)
        lines.append((step.name, step.name, step.kind, step.attempt, started, duration, status, result))
    rows = format_html_join(
        "",
        '<tr class="awa-step" data-step="{}"><td>{}</td><td>{}</td><td class="num">{}</td>'
        '<td class="awa-nowrap">{}</td><td class="awa-nowrap">{}</td><td>{}</td><td><code>{}</code></td></tr>',
        lines,
    )
    banner = format_html('<p class="awa-in-force">{}</p>', held.describe()) if held is not None else ""
    more = (
        format_html('<p class="awa-muted">{}</p>', f"the first {SHOWN_STEPS} steps are shown")
        if len(steps) >= SHOWN_STEPS
        else ""
    )
    return format_html(
        '{}<table class="awa-table awa-steps"><thead><tr><th>step</th><th>kind</th><th>attempt</th>'
        "<th>started</th><th>took</th><th>status</th><th>result</th></tr></thead><tbody>{}</tbody></table>{}",
        banner,
        rows,
        more,
    )


def restart_choices(job: Job) -> list[str]:
    """The steps the page offers to restart from, in the order they started: none for a running
    job, which ``restart_from_step`` refuses."""
    if job.state == JobState.RUNNING:
        return []
    names = JobStep.objects.filter(job_id=job.pk).order_by("started_at", "name").values_list("name", flat=True)
    return list(names[:SHOWN_STEPS])


def _steps(job: Job) -> list[JobStep]:
    """The job's steps, read once per page (the fieldsets and the field both ask)."""
    cached: list[JobStep] | None = getattr(job, "_awa_steps", None)
    if cached is None:
        cached = steps_of(job)
        job._awa_steps = cached  # type: ignore[attr-defined]
    return cached


class StepsMixin(_JobAdminBase):
    """The job page's "Steps" section (only for a job that has steps) and its restart button's
    handling (the job admin's ``act/restart/`` POST, with ``step``)."""

    @admin.display(description="steps")
    def steps_timeline(self, obj: Job) -> SafeString:
        return step_timeline(obj, _steps(obj))

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is not None and _steps(obj):
            return fieldsets
        return [(name, options) for name, options in fieldsets if options["fields"] != ("steps_timeline",)]

    def restart(self, request: HttpRequest, job_id: int) -> None:
        """Restart the job from the POSTed step, and say what happened (or why not)."""
        step = request.POST.get("step", "").replace("\x00", "")
        try:
            done = restart_from_step(job_id, step, by=request.user.get_username())
        except RestartError as error:
            self.message_user(request, str(error), messages.ERROR)
            return
        forgot = ", ".join(done.forgotten)
        then = "it runs again now" if done.state == JobState.AVAILABLE else "it waits for its upstream jobs"
        self.message_user(
            request,
            f"Job {job_id}: restarted from step {step!r}, forgetting {len(done.forgotten)} step(s) ({forgot}); {then}.",
            messages.SUCCESS,
        )
