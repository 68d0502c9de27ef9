"""Job actions: retry, cancel and discard jobs by id; what the admin's actions call, and your code can.

Each takes ids, changes only the rows in a state the action applies to, and returns how many
rows it changed.

Locking contract: the affected rows are locked with ``SELECT … FOR UPDATE`` (in id order) and
re-checked against their state before they are changed, in one transaction; with
``skip_locked=True`` (the admin's bulk actions) a row another transaction holds is skipped, so a
chunk never waits behind a worker's claim or finalising write. A worker's
finalising write is guarded by ``(id, state = 'running', run_lease)``, so once a running job is
cancelled or discarded here, the worker's late write matches nothing. A job that ends here
(cancelled, or discarded before it ended) releases its workflow dependents in the same
transaction (``release_ended_jobs``): they are cancelled, or run anyway on an ``always`` edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import IntegrityError, connections, transaction
from django.db.models import Case, DateTimeField, F, Func, JSONField, Q, Value, When
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Greatest, JSONObject, Least, Now
from django.utils import timezone

from awa_django.defaults import MAX_ATTEMPTS_MAX
from awa_django.exceptions import InvalidJobError
from awa_django.models import Job, JobEdge, JobState
from awa_django.services.db import database_alias, notify
from awa_django.sql import CANCEL_CHANNEL, JOBS_CHANNEL, statements
from awa_django.validation import brief

REASON_MAX_LENGTH = 500
RETRYABLE_FROM = (JobState.FAILED, JobState.CANCELLED)
CANCELLABLE_FROM = (JobState.WAITING, JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE)


def _ids(ids: Iterable[int | str]) -> list[int]:
    """The job ids in ``ids``, sorted and once each: ints, or their decimal digits as a str.

    Anything else is refused before a row is touched: a str or bytes given for the list (iterated,
    ``"12"`` named jobs 1 and 2), a bool, a float (``int()`` truncated 1.9 to job 1), or text
    ``int()`` reads loosely (``" 1"``, ``"1_2"``, a full-width digit)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidJobError("ids", ids, "must be a list of job ids, e.g. [job.pk] or [12, 13]")
    wanted: set[int] = set()
    for job_id in ids:
        if isinstance(job_id, int) and not isinstance(job_id, bool):
            wanted.add(int(job_id))
        elif isinstance(job_id, str) and job_id.isascii() and job_id.isdigit():
            wanted.add(int(job_id))
        else:
            raise InvalidJobError(
                "ids", ids, f"{brief(job_id, 80)} is not a job id; pass a list of job ids (ints, or their digits)"
            )
    return sorted(wanted)


def _locked(ids: list[int], states: Sequence[str], skip_locked: bool = False) -> list[tuple[int, str, str]]:
    """Lock the rows among ``ids`` that are in ``states``, in id order; return (id, queue, state).
    With ``skip_locked`` a row locked elsewhere (a worker finalising it) is left out, not waited for.
    Raw SQL: the model reads a view of the hot and finished tables, which cannot be locked."""
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(
            statements["lock_jobs_skip_locked" if skip_locked else "lock_jobs"],
            {"ids": ids, "states": [str(state) for state in states]},
        )
        return [(int(job_id), str(queue), str(state)) for job_id, queue, state in cursor.fetchall()]


def retry_jobs(ids: Iterable[int | str], *, skip_locked: bool = False) -> int:
    """Failed or cancelled jobs become available now; return how many did.

    The attempt count is kept; ``max_attempts`` is raised to ``attempt + 1`` where the job had
    used them all, so it runs once more. A unique job whose key is now held by another job is
    left as it is (retrying it would break the uniqueness it asked for).

    A workflow step keeps its place in the graph, as ``retry_workflow`` re-arms one: it waits
    (``waiting``, ``pending`` counting them) for its upstream jobs that have not ended or are
    retried with it, and its own out-edges, consumed when it ended, open again for the dependents
    that still wait (its next end releases them once more, not twice).
    """
    wanted = _ids(ids)
    if not wanted:
        return 0
    alias = database_alias()
    with transaction.atomic(using=alias):
        edges = list(
            JobEdge.objects.using(alias).filter(downstream_id__in=wanted).values_list("upstream_id", "downstream_id")
        )
        upstreams = {up for up, _ in edges} - set(wanted)
        # the upstream jobs are locked with the retried ones, in one id order (a worker ending one
        # of them locks it, then its dependents): their state cannot change before this commits
        if upstreams:
            locked = _locked(sorted(set(wanted) | upstreams), [s.value for s in JobState], skip_locked)
            held = {r[0] for r in locked}
            # with skip_locked, an upstream a worker holds (ending it, perhaps) was not locked: its
            # state is not known yet, so the steps after it are skipped too, left for a later chunk
            busy = set(Job.objects.using(alias).filter(pk__in=upstreams - held).values_list("pk", flat=True))
            blocked = {down for up, down in edges if up in busy}
            rows = [r for r in locked if r[0] in set(wanted) and r[0] not in blocked and r[2] in RETRYABLE_FROM]
        else:  # no workflow step: only the rows this changes are locked
            rows = _locked(wanted, RETRYABLE_FROM, skip_locked)
        changed: list[tuple[int, str]] = []
        for start in range(0, len(rows), 1000):
            batch = rows[start : start + 1000]
            try:
                with transaction.atomic(using=alias):
                    _make_available([r[0] for r in batch])
                changed.extend((r[0], r[1]) for r in batch)
            except IntegrityError:  # a unique key is taken: retry one by one, skipping those
                for job_id, queue, _ in batch:
                    try:
                        with transaction.atomic(using=alias):
                            _make_available([job_id])
                        changed.append((job_id, queue))
                    except IntegrityError:
                        continue
        if changed:
            _rearm_steps(alias, [job_id for job_id, _ in changed], edges)
            queues = sorted({queue for _, queue in changed})
            notify(statements["notify_available_queues"], {"channel": JOBS_CHANNEL, "queues": queues})
    return len(changed)


def _rearm_steps(alias: str, retried: list[int], edges: list[tuple[int, int]]) -> None:
    """Put the retried workflow steps back in their graph (retry_jobs' docstring): each waits for
    its upstream jobs not ended (the retried ones are available again by now), and its out-edges
    count again for its dependents that still wait."""
    done = set(retried)
    ups = {up for up, down in edges if down in done}
    states = dict(Job.objects.using(alias).filter(pk__in=ups).values_list("pk", "state"))
    pending: dict[int, int] = {}
    for up, down in edges:
        if down in done and up in states and not JobState(states[up]).is_terminal:
            pending[down] = pending.get(down, 0) + 1
    for job_id, count in pending.items():
        # due at the transaction's now(), as rearm_jobs: the release schedules a dependent whose run_at
        # is past both its created_at and the release's now() (Django's Now() is the statement's time)
        Job.objects.using(alias).filter(pk=job_id).update(
            state=JobState.WAITING, pending=count, run_at=Func(template="now()", output_field=DateTimeField())
        )
    reopen_edges(alias, done)


def _make_available(ids: list[int]) -> int:
    return (
        Job.objects.using(database_alias())
        .filter(pk__in=ids)
        .update(
            state=JobState.AVAILABLE,
            run_at=timezone.now(),
            finalized_at=None,
            heartbeat_at=None,
            deadline_at=None,
            max_attempts=Greatest(F("max_attempts"), Least(F("attempt") + 1, Value(MAX_ATTEMPTS_MAX))),
        )
    )


def cancel_jobs(ids: Iterable[int | str], *, skip_locked: bool = False, reason: str = "") -> int:
    """Jobs not yet finished become cancelled; return how many did.

    ``reason`` (who cancelled and why, say) is recorded as an entry of each job's error history,
    ``cancelled: <reason>``, so the job's page says why it stopped.

    For a running job the worker holding it is told through ``pgnotify('awa_cancel', id)``
    (delivered at commit) and sets its handler's ``context.cancelled``; whatever the handler
    does next, the row stays cancelled.
    """
    wanted = _ids(ids)
    if not wanted:
        return 0
    with transaction.atomic(using=database_alias()):
        rows = _locked(wanted, CANCELLABLE_FROM, skip_locked)
        if not rows:
            return 0
        changed = (
            Job.objects.using(database_alias())
            .filter(pk__in=[r[0] for r in rows])
            .update(
                state=JobState.CANCELLED,
                # The database's clock, as every finalising write: the history rollup closes
                # minutes by it, so a web server's clock behind it would file the job in a minute
                # already final (never counted); statement_timestamp(), not now(): the caller's
                # transaction may have begun long before.
                finalized_at=Func(function="statement_timestamp", output_field=DateTimeField()),
                heartbeat_at=None,
                deadline_at=None,
                errors=_with_reason(reason) if reason else F("errors"),
            )
        )
        release_ended([r[0] for r in rows], JobState.CANCELLED)
        running = [r[0] for r in rows if r[2] == JobState.RUNNING]
        if running:
            notify(statements["notify_cancelled_jobs"], {"channel": CANCEL_CHANNEL, "ids": running})
    return changed


def release_ended(ids: Sequence[int], state: JobState) -> None:
    """Consume the out-edges of jobs just ended in ``state`` in this transaction (their rows locked)."""
    if ids:
        with connections[database_alias()].cursor() as cursor:
            cursor.execute(statements["release_ended_jobs"], {"ids": list(ids), "states": [state.value] * len(ids)})


def _with_reason(reason: str) -> CombinedExpression:
    """The row's errors with one more entry saying it was cancelled and why (the attempt it was at).

    A job a worker is running gets its attempt's start and worker in the entry too, as a worker's
    own outcome does (finalize_jobs), so the attempt keeps them in the job's attempt history."""
    # NUL cannot be stored in Postgres text (a DataError cancelled nothing), as the admin's form drops it
    error = Value(f"cancelled: {reason.replace(chr(0), '')[:REASON_MAX_LENGTH]}")
    entry = Case(
        When(
            Q(state=JobState.RUNNING, attempted_by__isnull=False),
            then=JSONObject(
                error=error, attempt=F("attempt"), at=Now(), started_at=F("attempted_at"), worker=F("attempted_by")
            ),
        ),
        default=JSONObject(error=error, attempt=F("attempt"), at=Now()),
        output_field=JSONField(),
    )
    return CombinedExpression(F("errors"), "||", Func(entry, function="jsonb_build_array"), output_field=JSONField())


def discard_jobs(ids: Iterable[int | str], *, skip_locked: bool = False) -> int:
    """Delete jobs, whatever their state; return how many were deleted.

    A running job's worker is told as for a cancel, so its handler stops early.
    """
    wanted = _ids(ids)
    if not wanted:
        return 0
    with transaction.atomic(using=database_alias()):
        rows = _locked(wanted, [s.value for s in JobState], skip_locked)
        if not rows:
            return 0
        release_ended([r[0] for r in rows if not JobState(r[2]).is_terminal], JobState.CANCELLED)
        deleted, _ = Job.objects.using(database_alias()).filter(pk__in=[r[0] for r in rows]).delete()
        running = [r[0] for r in rows if r[2] == JobState.RUNNING]
        if running:
            notify(statements["notify_cancelled_jobs"], {"channel": CANCEL_CHANNEL, "ids": running})
    return int(deleted)


def reopen_edges(alias: str, rearm: set[int]) -> None:
    """The re-armed jobs' edges (retry_workflow's, or restart_from_step's one ended job) to
    dependents that are not re-armed and still wait for others were consumed when those jobs
    ended; each end to come consumes them again, so they count again in their dependents'
    ``pending`` (else a dependent runs before its other upstreams end).

    A waiting job with ``pending`` 0 is a durable job parked in a wait, not a dependent: its
    upstreams' wait is over, and it is left alone. The dependents are locked FOR UPDATE (id order)
    before their count changes, as ``Workflow.extending`` locks the jobs it joins."""
    counts: dict[int, int] = {}
    for down in JobEdge.objects.using(alias).filter(upstream_id__in=rearm).values_list("downstream_id", flat=True):
        if down not in rearm:
            counts[down] = counts.get(down, 0) + 1
    if not counts:
        return
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["lock_downstream_jobs"], {"ids": sorted(counts)})
        waiting = {int(job_id) for job_id, state, _ in cursor.fetchall() if state == JobState.WAITING}
    if not waiting:
        return
    ids = sorted(
        Job.objects.using(alias)
        .filter(pk__in=waiting, state=JobState.WAITING, pending__gt=0)
        .values_list("pk", flat=True)
    )
    if ids:
        with connections[alias].cursor() as cursor:
            cursor.execute(statements["add_pending_edges"], {"ids": ids, "counts": [counts[i] for i in ids]})
