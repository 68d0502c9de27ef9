"""Durable jobs' operator services (docs/guide/durable-jobs.md): how many jobs are parked, per
queue (``parked_counts``, the metrics view's ``awa_queue_parked_jobs``), and restarting a job from
one of its steps (``restart_from_step``, what the admin's "Restart from step" button calls).

``restart_from_step`` forgets that step and the steps after it, and runs the job again from the top.

"After" is by ``started_at``: the step chosen and every step of the job that started at or after
it are deleted, so at the next attempt they run again (a wait waits again, for a new event: the
one it took is gone with it). The steps before it keep their results.

The job may be finished (completed, failed, cancelled), parked (sleeping, waiting for an event) or
waiting to run; a running job is refused (its handler would go on with the steps it read), and so
is a step the job does not have. The job becomes available now, its attempt count kept and, where
it had used them all, ``max_attempts`` raised by one, as ``retry_jobs`` does; a workflow step whose
upstreams have not all ended stays waiting for them. The restart is recorded as an entry of the
job's error history (``restarted: from step 'charge' by ana; forgot 3 step(s): charge, sleep#1,
ship``), so its page shows what happened.

Locking contract: one transaction on the jobs' database (joining the caller's, if one is open);
the job's row is locked first (``lock_jobs``, FOR UPDATE, in whichever of awa_job and
awa_job_done holds it), its state checked under the lock, then its steps deleted and its row
moved, in that order. A worker cannot claim or park it meanwhile; a signal to it waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from django.db import IntegrityError, connections, transaction
from django.db.models import Count, F, Func, JSONField, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Greatest, JSONObject, Least, Now

from awa_django.defaults import MAX_ATTEMPTS_MAX
from awa_django.exceptions import RestartError
from awa_django.models import Job, JobStep
from awa_django.services.db import database_alias, notify
from awa_django.services.jobs import REASON_MAX_LENGTH, reopen_edges
from awa_django.sql import JOBS_CHANNEL, statements
from awa_django.states import JobState

RESTARTED = "restarted"  # the error entry's prefix: "restarted: from step …"
SLEEPING, WAITING = "sleeping", "waiting"  # how a job is parked: awa_queue_parked_jobs' "parked" label


def parked_counts(queues: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    """``{queue: {"sleeping": n, "waiting": n}}``: the durable jobs parked in a sleep
    (``Job.objects.sleeping()``) and in a wait for an event (``awaiting_event()``), per queue that
    has any. Two queries; each reads the scheduled (or waiting) jobs and probes awa_job_step's
    primary key for each, so the cost is those jobs, never the finished history."""
    alias = database_alias()
    jobs = Job.objects.using(alias).all()
    if queues is not None:
        jobs = jobs.filter(queue__in=list(queues))
    counts: dict[str, dict[str, int]] = {}
    for how, parked in ((SLEEPING, jobs.sleeping()), (WAITING, jobs.awaiting_event())):
        for row in parked.values("queue").annotate(n=Count("pk")).order_by():
            counts.setdefault(row["queue"], {SLEEPING: 0, WAITING: 0})[how] = row["n"]
    return counts


class Restarted(NamedTuple):
    """A restart done: the steps forgotten (by ``started_at``, the chosen one first) and the job's
    state now (available, or waiting for its workflow upstreams)."""

    job_id: int
    forgotten: list[str]
    state: JobState


def restart_from_step(job_id: int, step: str, *, by: str = "") -> Restarted:
    """Forget step ``step`` of job ``job_id`` and every step that started at or after it, and make
    the job run again from the top; ``by`` (who asked) goes into the error history's entry.
    ``RestartError`` (naming the job, the step and why) for a job that does not exist, is running,
    or has no such step; nothing is changed then."""
    alias = database_alias()
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(statements["lock_jobs"], {"ids": [job_id], "states": [s.value for s in JobState]})
            locked = cursor.fetchone()
        if locked is None:
            raise RestartError(job_id, step, None, "no such job exists (never enqueued, or deleted by retention)")
        queue, state = str(locked[1]), JobState(locked[2])
        if state == JobState.RUNNING:
            raise RestartError(
                job_id,
                step,
                state,
                "it is running; cancel it, or wait for it to finish or park, then restart it",
            )
        steps = JobStep.objects.using(alias).filter(job_id=job_id)
        chosen = steps.filter(name=step).values_list("started_at", flat=True).first()
        if chosen is None:
            names = list(steps.order_by("started_at", "name").values_list("name", flat=True)[:10])
            have = ", ".join(repr(n) for n in names) if names else "none"
            raise RestartError(job_id, step, state, f"it has no step of that name (its steps: {have})")
        later = steps.filter(started_at__gte=chosen)
        forgotten = list(later.order_by("started_at", "name").values_list("name", flat=True))
        later.delete()
        pending = Job.objects.using(alias).filter(pk=job_id).values_list("pending", flat=True).get()
        now_state = JobState.WAITING if pending else JobState.AVAILABLE
        entry = _entry(step, forgotten, by)
        try:
            with transaction.atomic(using=alias):
                Job.objects.using(alias).filter(pk=job_id).update(
                    state=now_state,
                    run_at=Now(),
                    finalized_at=None,
                    heartbeat_at=None,
                    deadline_at=None,
                    max_attempts=Greatest(F("max_attempts"), Least(F("attempt") + 1, Value(MAX_ATTEMPTS_MAX))),
                    errors=entry,
                )
        except IntegrityError:
            raise RestartError(
                job_id, step, state, "its unique key is held by another job now; finish or delete that one first"
            ) from None
        if state.is_terminal:  # its end released its dependents: the next one must find its edges open
            reopen_edges(alias, {job_id})
        if now_state == JobState.AVAILABLE:
            notify(statements["notify_available_queues"], {"channel": JOBS_CHANNEL, "queues": [queue]})
    return Restarted(job_id, forgotten, now_state)


def _entry(step: str, forgotten: list[str], by: str) -> CombinedExpression:
    """The row's errors with one more entry: the restart, who asked, and the steps forgotten."""
    text = f"{RESTARTED}: from step {step!r}" + (f" by {by}" if by else "")
    text += f"; forgot {len(forgotten)} step(s): {', '.join(forgotten)}"
    error = Value(text[:REASON_MAX_LENGTH])
    record = JSONObject(error=error, attempt=F("attempt"), at=Now(), restarted_from=Value(step))
    return CombinedExpression(F("errors"), "||", Func(record, function="jsonb_build_array"), output_field=JSONField())
