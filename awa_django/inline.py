"""Running jobs in-process on Django's own connection: ``awa_django.testing.run_jobs`` and
``AWA["EXECUTION"] = "immediate"``.

A worker claims on its psycopg pool and runs ``def`` handlers in a thread pool; neither could see
rows that only exist inside a test's transaction. Here the same steps run on the caller's Django
connection instead, with the same parts: the claim is ``claim_due_jobs`` (claim_jobs' UPDATE:
running, attempt + 1, run_lease + 1), the handler runs through the worker's ``Executor`` (so a
return, an exception, ``Snooze``, ``RetryAfter``, ``Cancel``, ``TerminalError`` or an unknown kind
map to the same ``Outcome``), and the outcome is written by ``complete_jobs`` or ``finalize_jobs``,
the statements the worker's batch writer runs. Nothing here restates a state rule.

``async def`` handlers run on an event loop started by ``async_to_sync``; their thread-sensitive
``sync_to_async`` calls (Django's async ORM among them) come back to the calling thread, and
``def`` handlers run in the calling thread itself: both use the caller's connection and see its
transaction. There is no deadline and no heartbeat: nothing else is running to rescue the job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction

from awa_django.conf import awa_settings
from awa_django.registry import JobHandler, Registry, registry
from awa_django.sql import statements
from awa_django.worker.context import COMPLETED, ClaimedJob, JobContext, Outcome
from awa_django.worker.executor import Executor

logger = logging.getLogger(__name__)

MAX_IMMEDIATE_CHAIN = 1000
"""Jobs one immediate-mode drain runs at most (a job enqueuing jobs without end stops here)."""

_running_inline: ContextVar[bool] = ContextVar("awa_running_inline", default=False)


def running_inline() -> bool:
    """True while a handler runs in-process here (so on the caller's connection, not a worker's)."""
    return _running_inline.get()


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt run in-process: the job as claimed, and how the attempt ended."""

    job_id: int
    kind: str
    queue: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    state: str
    """The state the attempt left the job in: completed, retryable, scheduled (snoozed), failed
    or cancelled."""
    error: dict[str, Any] | None
    """The error entry appended to the job's ``errors`` (None when it completed or snoozed)."""
    result: Any
    """The handler's return value as stored (decoded JSON), None if it returned nothing."""

    def __str__(self) -> str:
        text = f"job {self.job_id} {self.kind!r} (queue {self.queue!r}) attempt {self.attempt}/{self.max_attempts}"
        text += f" -> {self.state}"
        if self.error is not None:
            text += f": {self.error.get('error')}"
        return text


class InlineExecutor(Executor):
    """The worker's Executor, with ``def`` handlers run in the calling thread, not a thread pool.

    ``sync_to_async(thread_sensitive=True)`` under ``async_to_sync`` runs in the thread that called
    ``async_to_sync``: the caller's, with its Django connection and open transaction. Unlike the
    worker's ``_call_sync``, connections are not closed around the call: it is the caller's.
    """

    def __init__(self, handlers: Registry) -> None:
        super().__init__(handlers, sync_threads=1)

    async def _run_sync(
        self, handler: JobHandler, context: JobContext, args: dict[str, Any], deadline: float | None
    ) -> Any:
        call: Callable[[], Any]
        call = partial(handler.func, context, **args) if handler.takes_context else partial(handler.func, **args)
        running = sync_to_async(call, thread_sensitive=True)()
        return await (running if deadline is None else asyncio.wait_for(running, deadline))


def _loads(value: Any) -> Any:
    """A jsonb column as read through Django's cursor (which leaves jsonb as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def database_now(alias: str) -> datetime:
    """The database's ``now()`` on this connection (in a transaction: the transaction's start)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["database_now"])
        row = cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def claim(
    alias: str,
    *,
    now: datetime,
    limit: int,
    ids: Sequence[int] | None = None,
    queue: str | None = None,
    kind: str | None = None,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` jobs due by ``now`` on Django's connection ``alias`` (see claim_due_jobs)."""
    params = {"ids": None if ids is None else list(ids), "queue": queue, "kind": kind, "now": now, "limit": limit}
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["claim_due_jobs"], params)
        rows = cursor.fetchall()
    return [
        ClaimedJob(
            id=row[0],
            kind=row[1],
            queue=row[2],
            args=_loads(row[3]),
            attempt=row[4],
            max_attempts=row[5],
            run_lease=row[6],
            priority=row[7],
            metadata=_loads(row[8]),
        )
        for row in sorted(rows, key=lambda r: (r[7], r[0]))
    ]


def run_claimed(alias: str, job: ClaimedJob, handlers: Registry | None = None) -> JobRun:
    """Run one claimed attempt through the worker's Executor and write its outcome, like a worker."""
    executor = InlineExecutor(handlers or registry)
    context = JobContext(job)
    token = _running_inline.set(True)
    try:
        outcome = async_to_sync(executor.execute)(job, context, None)
    finally:
        _running_inline.reset(token)
        executor.shutdown()
    context.finishing = True
    written = write_outcome(alias, job, outcome, context.progress)
    if not written:  # only a concurrent writer could have changed the row: say so, never hide it
        logger.warning(
            "in-process attempt lost before its result was written job_id=%s kind=%s attempt=%s run_lease=%s",
            job.id,
            job.kind,
            job.attempt,
            job.run_lease,
        )
    return JobRun(
        job_id=job.id,
        kind=job.kind,
        queue=job.queue,
        args=job.args,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        state=outcome.state,
        error=outcome.error,
        result=None if outcome.result is None else json.loads(outcome.result),
    )


def write_outcome(alias: str, job: ClaimedJob, outcome: Outcome, progress: Any) -> bool:
    """complete_jobs or finalize_jobs for one attempt, as the worker's batch writer chooses them."""
    if outcome is COMPLETED and progress is None:
        name = "complete_jobs"
        params: dict[str, Any] = {"ids": [job.id], "leases": [job.run_lease]}
    else:
        name = "finalize_jobs"
        params = {
            "ids": [job.id],
            "leases": [job.run_lease],
            "states": [outcome.state],
            "delays": [outcome.delay],
            "errors": [None if outcome.error is None else json.dumps(outcome.error, default=str)],
            "refunds": [outcome.refund],
            "progress": [None if progress is None else json.dumps(progress)],
            "results": [outcome.result],
        }
    with connections[alias].cursor() as cursor:
        cursor.execute(statements[name], params)
        return cursor.fetchone() is not None


# --- immediate mode ---------------------------------------------------------------------------


def execution_mode() -> str:
    """``AWA["EXECUTION"]``; ImproperlyConfigured (naming the value and the choices) if unknown
    (``awa_django.conf`` holds the rule)."""
    return awa_settings().EXECUTION


def after_enqueue(alias: str, job_ids: Sequence[int]) -> None:
    """The enqueue paths' hook: in immediate mode, run these jobs once the caller's transaction commits.

    ``transaction.on_commit`` never runs its callback for a transaction that rolls back, so a
    rolled-back enqueue runs nothing; outside a transaction (autocommit) the job runs at once.
    """
    if execution_mode() == "immediate" and job_ids:
        transaction.on_commit(partial(_run_immediately, alias, list(job_ids)), using=alias)


def after_enqueue_many(alias: str, created_at: datetime, count: int) -> None:
    """``after_enqueue`` for ``enqueue_many``, whose COPY returns no ids: find them first."""
    if execution_mode() != "immediate" or count <= 0:
        return
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["find_copied_jobs"], {"created_at": created_at, "count": count})
        ids = sorted(row[0] for row in cursor.fetchall())
    after_enqueue(alias, ids)


_drain = threading.local()


@contextmanager
def _draining() -> Iterator[deque[tuple[str, int]]]:
    queue: deque[tuple[str, int]] = deque()
    _drain.pending = queue
    try:
        yield queue
    finally:
        _drain.pending = None


def _run_immediately(alias: str, job_ids: list[int]) -> None:
    """Run the jobs, and the jobs they enqueue, one after another in this thread.

    A job enqueued by a running job (its commit calls back here) joins the queue of the drain
    already under way instead of running inside its parent's handler, so chains do not nest.
    """
    pending: deque[tuple[str, int]] | None = getattr(_drain, "pending", None)
    if pending is not None:
        pending.extend((alias, job_id) for job_id in job_ids)
        return
    with _draining() as pending:
        pending.extend((alias, job_id) for job_id in job_ids)
        ran = 0
        while pending:
            if ran >= MAX_IMMEDIATE_CHAIN:
                logger.warning(
                    "immediate mode stopped after %s jobs in one chain; left for a worker left=%s first_job_id=%s",
                    ran,
                    len(pending),
                    pending[0][1],
                )
                return
            job_alias, job_id = pending.popleft()
            claimed = claim(job_alias, now=database_now(job_alias), limit=1, ids=[job_id])
            if not claimed:
                # Scheduled for later, its queue paused, or already taken: a worker runs it when due.
                logger.info("immediate mode left job waiting job_id=%s (not due, queue paused or taken)", job_id)
                continue
            run = run_claimed(job_alias, claimed[0])
            ran += 1
            _log_immediate(run)


def _log_immediate(run: JobRun) -> None:
    if run.state == "completed":
        logger.info("immediate mode ran job job_id=%s kind=%s state=completed", run.job_id, run.kind)
    elif run.state in ("retryable", "scheduled"):
        logger.warning(
            "immediate mode ran job job_id=%s kind=%s attempt=%s state=%s error=%r; "
            "it is not run again here: a worker or run_jobs() runs it when due",
            run.job_id,
            run.kind,
            run.attempt,
            run.state,
            None if run.error is None else run.error.get("error"),
        )
    else:
        logger.warning(
            "immediate mode ran job job_id=%s kind=%s attempt=%s state=%s error=%r",
            run.job_id,
            run.kind,
            run.attempt,
            run.state,
            None if run.error is None else run.error.get("error"),
        )
