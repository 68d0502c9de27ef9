"""Claim, run and write one attempt in-process, on Django's own connection, with the worker's parts.

A worker claims on its psycopg pool and runs ``def`` handlers in a thread pool; neither could see
rows that only exist inside a test's transaction. Here the same steps run on the caller's Django
connection instead: the claim is ``claim_due_jobs`` (claim_jobs' UPDATE: running, attempt + 1,
run_lease + 1), the handler runs through the worker's ``Executor`` (so a return, an exception,
``Snooze``, ``RetryAfter``, ``Cancel``, ``TerminalError`` or an unknown kind map to the same
``Outcome``), and the outcome is written by the statements ``writes.outcome_writes`` builds for the
worker's batch writer. Nothing here restates a state rule.

``async def`` handlers run on an event loop started by ``async_to_sync``; their thread-sensitive
``sync_to_async`` calls (Django's async ORM among them) come back to the calling thread, and
``def`` handlers run in the calling thread itself: both use the caller's connection and see its
transaction. There is no deadline and no heartbeat: nothing else is running to rescue the job.

An atomic handler (``@job(atomic=True)``) runs as in the worker (``awa_django.worker.atomic``): in
``transaction.atomic()`` on the caller's connection (a savepoint inside the caller's transaction),
its completion written inside it, so its writes and its completion stand or fall together here too.

Used by immediate mode and ``run_jobs`` (``awa_django.inline``, ``awa_django.testing``), and
imported only by them, when a job runs: it is the one part of this package that loads worker code.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections

from awa_django.context import ClaimedJob, JobContext
from awa_django.handlers import Handler, Registry, registry
from awa_django.inline.run import JobRun, running_here
from awa_django.sql import statements
from awa_django.storable import read_json
from awa_django.worker.atomic import write_outcome as write_outcome  # one writer on a Django connection
from awa_django.worker.executor import Executor

# The immediate-mode and run_jobs messages are the inline door's, whichever module writes them.
logger = logging.getLogger("awa_django.inline")


class InlineExecutor(Executor):
    """The worker's Executor, with ``def`` handlers run in the calling thread, not a thread pool.

    ``sync_to_async(thread_sensitive=True)`` under ``async_to_sync`` runs in the thread that called
    ``async_to_sync``: the caller's, with its Django connection and open transaction. Unlike the
    worker's ``_call_sync``, connections are not closed around the call: it is the caller's.
    """

    def __init__(self, handlers: Registry, alias: str) -> None:
        super().__init__(handlers, sync_threads=1, alias=alias)

    async def _run_sync(
        self, handler: Handler, context: JobContext, args: dict[str, Any], deadline: float | None
    ) -> Any:
        running = sync_to_async(partial(self._invoke, handler, context, args), thread_sensitive=True)()
        return await (running if deadline is None else asyncio.wait_for(running, deadline))


def _loads(value: Any) -> Any:
    """A jsonb column as read through Django's cursor (which leaves jsonb as text): as the worker's
    claim reads it (``storable.read_json``: a value nested past Python's recursion limit fails its
    own job, not the whole run)."""
    return read_json(value) if isinstance(value, str | bytes) else value


def _claimed_jobs(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[ClaimedJob]:
    """claim_due_jobs' rows, decoded by column name (Django's cursor has no row factory)."""
    jobs = []
    for values in rows:
        row = dict(zip(names, values, strict=True))
        row["args"], row["metadata"] = _loads(row["args"]), _loads(row["metadata"])
        jobs.append(ClaimedJob(**row))
    return jobs


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
        jobs = _claimed_jobs([column.name for column in cursor.description], cursor.fetchall())
    return sorted(jobs, key=lambda job: (job.priority, job.id))


def run_claimed(
    alias: str, job: ClaimedJob, handlers: Registry | None = None, *, clock_floor: datetime | None = None
) -> JobRun:
    """Run one claimed attempt through the worker's Executor and write its outcome, like a worker.
    ``clock_floor``: a durable job's sleeps and waits read the clock as at least this (run_jobs' ``now``)."""
    executor = InlineExecutor(handlers or registry, alias)
    context = JobContext(job)
    context.clock_floor = clock_floor
    try:
        with running_here():
            outcome = async_to_sync(executor.execute)(job, context, None)
    finally:
        executor.shutdown()
    context.finishing = True
    if outcome.settled is None:
        written = write_outcome(alias, job, outcome, context.progress_json)
    else:  # an atomic handler's: written (or refused) in its own transaction
        written = outcome.settled
    if not written:  # only a concurrent writer could have changed the row: say so, never hide it
        logger.warning(
            "in-process attempt not written: its row changed meanwhile (cancelled, deleted or rescued) "
            "job_id=%s kind=%s attempt=%s run_lease=%s",
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
        parked=outcome.parked,
    )
