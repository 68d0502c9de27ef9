"""``run_jobs``: run the due jobs through the real executor, on the test's own connection."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from awa_django.conf import awa_settings
from awa_django.context import ClaimedJob, Outcome
from awa_django.exceptions import AwaError
from awa_django.inline import JobRun
from awa_django.inline.attempt import claim, run_claimed, write_outcome
from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.worker.executor import error_entry

MAX_RUNS = 1000
"""Attempts one ``run_jobs()`` without ``limit`` runs at most before it calls the jobs runaway."""

FAILED_STATES = (JobState.RETRYABLE, JobState.FAILED)


@dataclass(frozen=True)
class RunReport:
    """What ``run_jobs`` ran, in order: one ``JobRun`` per attempt (a retried job appears once per
    attempt that ran)."""

    runs: tuple[JobRun, ...]

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self.runs)

    def __getitem__(self, index: int) -> JobRun:
        return self.runs[index]

    @property
    def kinds(self) -> list[str]:
        """The kind of each attempt, in the order they ran."""
        return [run.kind for run in self.runs]

    def _in(self, *states: JobState) -> list[JobRun]:
        return [run for run in self.runs if run.state in states]

    @property
    def completed(self) -> list[JobRun]:
        return self._in(JobState.COMPLETED)

    @property
    def retried(self) -> list[JobRun]:
        """Attempts that failed and left the job retryable (it runs again after its backoff)."""
        return self._in(JobState.RETRYABLE)

    @property
    def failed(self) -> list[JobRun]:
        """Attempts that left the job failed (attempts exhausted, TerminalError, unknown kind)."""
        return self._in(JobState.FAILED)

    @property
    def snoozed(self) -> list[JobRun]:
        """Attempts that snoozed (``Snooze``): the job is scheduled again."""
        return [run for run in self._in(JobState.SCHEDULED) if not run.parked]

    @property
    def parked(self) -> list[JobRun]:
        """Attempts of durable jobs that parked in a sleep or a wait (scheduled or waiting)."""
        return [run for run in self.runs if run.parked]

    @property
    def cancelled(self) -> list[JobRun]:
        return self._in(JobState.CANCELLED)

    @property
    def failures(self) -> list[JobRun]:
        """Attempts whose handler failed: retried or failed ones."""
        return self._in(*FAILED_STATES)

    def __str__(self) -> str:
        if not self.runs:
            return "no jobs ran"
        return "\n".join(str(run) for run in self.runs)


class JobsFailedError(AwaError, AssertionError):
    """``run_jobs`` ran attempts that failed; ``report`` has every attempt, failed or not."""

    def __init__(self, report: RunReport) -> None:
        self.report = report
        failures = report.failures
        lines = [f"{len(failures)} of {len(report)} job attempt(s) run by run_jobs() failed:"]
        lines += [f"  {run}" for run in failures]
        trace = next((run.error.get("traceback") for run in failures if run.error and run.error.get("traceback")), None)
        if trace:
            lines.append(f"traceback of the first failure:\n{trace.rstrip()}")
        lines.append(
            "if failing is what the test expects, call run_jobs(raise_on_failure=False) and inspect the "
            "report's .retried / .failed"
        )
        super().__init__("\n".join(lines))


class RunawayJobsError(AwaError, AssertionError):
    """``run_jobs`` without a ``limit`` ran ``MAX_RUNS`` attempts and jobs were still due."""

    def __init__(self, report: RunReport) -> None:
        self.report = report
        last = ", ".join(dict.fromkeys(report.kinds[-20:]))
        super().__init__(
            f"run_jobs() ran {len(report)} attempts and jobs are still due (last kinds: {last}): a job that "
            "enqueues jobs without end, or snoozes without a delay? Pass limit=N to run at most N attempts."
        )


def _kind_name(kind: object) -> str | None:
    """A job kind from a kind string, a ``@job`` handler or a ``@task``."""
    if kind is None or isinstance(kind, str):
        return kind
    for attribute in ("kind", "module_path"):  # JobHandler.kind; a Tasks framework Task's module_path
        value = getattr(kind, attribute, None)
        if isinstance(value, str):
            return value
    raise TypeError(f"kind must be a job kind string, a @job handler or a @task, not {kind!r}")


def _check_arguments(queue: object, limit: object, now: object, advance: object) -> None:
    if advance is not None and (not isinstance(advance, timedelta) or advance < timedelta(0)):
        raise ValueError(
            f"advance is {advance!r}; pass a timedelta of 0 or more (how far to run the clock on), or None"
        )
    if queue is not None and not isinstance(queue, str):
        raise TypeError(f"queue must be a queue name (str) or None, not {queue!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit is {limit!r}; pass a number of attempts of at least 1, or None for all due jobs")
    if now is not None:
        if not isinstance(now, datetime):
            raise TypeError(f"now must be a datetime or None, not {now!r}")
        if settings.USE_TZ and timezone.is_naive(now):
            raise ValueError(f"now is naive ({now!r}) but USE_TZ is on; pass an aware datetime (timezone.now() + …)")


def run_jobs(
    *,
    queue: str | None = None,
    kind: Any = None,
    limit: int | None = None,
    now: datetime | None = None,
    advance: timedelta | None = None,
    raise_on_failure: bool = True,
    using: str | None = None,
) -> RunReport:
    """Run every due job, one attempt at a time, as a worker would, on Django's own connection.

    Works inside ``TestCase`` and ``pytest.mark.django_db`` transactions: the claim, the handler's
    ORM calls and the final write all happen in the caller's transaction (``def`` handlers run in
    this thread; ``async def`` handlers on an event loop whose ``sync_to_async`` calls come back
    here). Each attempt goes through the worker's Executor and writes its outcome with the worker's
    SQL: completions, results, retries with backoff, snoozes, cancels, failures.

    - ``queue`` / ``kind``: only jobs of that queue / kind (a kind string, a ``@job`` handler or a
      ``@task``). Jobs enqueued by the jobs that run, if they match, run too.
    - ``now``: the cutoff for scheduled and retryable jobs (available jobs always run). By default
      the database's ``now()`` when the call starts (inside a transaction, the transaction's
      start), so a retry's backoff is never over within the run. Pass a later time to also run
      jobs scheduled up to then, retries and snoozes whose delay ends by then included. Durable
      jobs read it as their clock: a sleep or a wait's timeout that ends by ``now`` is over, and
      one begun in this call is counted from ``now`` (so it ends after it: ``advance`` runs
      through it). The durable clock a call moved on is kept for the rest of the test's
      transaction (read_test_clock): a later call does not take it back. A signal sent in the
      test wakes its job for the next ``run_jobs``.
    - ``advance``: run the clock on by this much, without waiting: once nothing is due, the clock
      moves to the next job's ``run_at`` (a durable sleep's wake time, a wait's deadline, a snooze,
      a retry's backoff) by ``now + advance`` (without ``now``: the database's clock as the call
      starts, plus ``advance``), the jobs due then run, and so on, in time order.
      ``run_jobs(advance=timedelta(days=1))`` runs what the next day would run.
    - ``limit``: run at most this many attempts. Without it, every due job runs, and more than
      ``MAX_RUNS`` attempts raise ``RunawayJobsError``.
    - ``raise_on_failure``: raise ``JobsFailedError`` after the run if any attempt failed (its
      handler raised: the job is retryable or failed), naming each; pass False to inspect them in
      the report. Either way every outcome is written first.
    - ``using``: the database alias (default ``AWA["DATABASE_ALIAS"]``).

    Jobs of a paused queue are left waiting, as a worker leaves them. There are no deadlines and
    no heartbeats: a handler runs until it returns.
    """
    _check_arguments(queue, limit, now, advance)
    kind_name = _kind_name(kind)
    alias = using or awa_settings().DATABASE_ALIAS
    kept, transaction_now, clock = _read_clocks(alias)
    cutoff = now if now is not None else transaction_now
    # Durable jobs' clock: never before where an earlier call of this test moved it.
    floor = now if kept is None or (now is not None and now > kept) else kept
    # A sleep begun in an earlier call counts from the clock then, past this transaction's now().
    horizon = None if advance is None else (clock if floor is None or clock > floor else floor) + advance
    runs: list[JobRun] = []
    while limit is None or len(runs) < limit:
        claimed = claim(alias, now=cutoff, limit=1, queue=queue, kind=kind_name)
        if not claimed:
            following = None if horizon is None else _next_run_at(alias, cutoff, horizon, queue, kind_name)
            if following is None:
                break
            cutoff = following
            floor = following if floor is None or following > floor else floor
            continue
        if len(runs) >= MAX_RUNS:
            _hand_back(alias, claimed[0])
            raise RunawayJobsError(RunReport(tuple(runs)))
        runs.append(run_claimed(alias, claimed[0], clock_floor=floor))
    if floor is not None and floor != kept and connections[alias].in_atomic_block:
        with connections[alias].cursor() as cursor:
            cursor.execute(statements["set_test_clock"], {"clock": floor})
    report = RunReport(tuple(runs))
    if raise_on_failure and report.failures:
        raise JobsFailedError(report)
    return report


def _read_clocks(alias: str) -> tuple[datetime | None, datetime, datetime]:
    """The test clock kept by an earlier call (or None), the transaction's now() and the clock."""
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["read_test_clock"])
        row = cursor.fetchone()
        assert row is not None
        clocks = dict(zip([column.name for column in cursor.description], row, strict=True))
    return clocks["kept"], clocks["transaction_now"], clocks["clock"]


def _next_run_at(
    alias: str, after: datetime, horizon: datetime, queue: str | None, kind: str | None
) -> datetime | None:
    """The earliest run_at past ``after`` and by ``horizon`` of a scheduled or retryable job (of
    that queue and kind): where ``advance`` moves the clock next. Strictly later each time, so the
    walk ends, a paused queue's jobs included."""
    from awa_django.models import Job

    jobs = Job.objects.using(alias).filter(
        state__in=[JobState.SCHEDULED, JobState.RETRYABLE], run_at__gt=after, run_at__lte=horizon
    )
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    if kind is not None:
        jobs = jobs.filter(kind=kind)
    return jobs.order_by("run_at").values_list("run_at", flat=True).first()


def _hand_back(alias: str, job: ClaimedJob) -> None:
    """Give back an attempt claimed past the bound: due again, the attempt not counted, and an
    error entry saying why, so that nothing is left running."""
    error = error_entry(job, f"run_jobs() stopped after {MAX_RUNS} attempts, before running this one")
    write_outcome(alias, job, Outcome(JobState.RETRYABLE, error=error, refund=1), None)
