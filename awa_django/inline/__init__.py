"""Immediate mode and in-process execution: running jobs on Django's own connection, the door of
``AWA["EXECUTION"] = "immediate"`` and of ``awa_django.testing.run_jobs``. One package:

- here, the door: what the enqueue paths call (``after_enqueue``) and the Tasks backend asks
  (``running_inline``), and the immediate-mode drain. Light on purpose: loading it, as every
  enqueue does, loads no worker code;
- ``awa_django.inline.run``: one in-process attempt's record (``JobRun``) and the marker that a
  handler runs in-process;
- ``awa_django.inline.attempt``: the machinery that claims, runs and writes an attempt in-process,
  the worker's own executor and SQL on the caller's connection. The drain imports it when a job
  actually runs here, and only then.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial

from django.db import connections, transaction

from awa_django.conf import awa_settings
from awa_django.inline.run import JobRun as JobRun
from awa_django.inline.run import running_here as running_here
from awa_django.inline.run import running_inline as running_inline
from awa_django.sql import statements
from awa_django.states import JobState

logger = logging.getLogger(__name__)

MAX_IMMEDIATE_CHAIN = 1000
"""Jobs one immediate-mode drain runs at most (a job enqueuing jobs without end stops here)."""


def database_now(alias: str) -> datetime:
    """The database's ``now()`` on this connection (in a transaction: the transaction's start)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["database_now"])
        row = cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


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
    from awa_django.inline.attempt import claim, run_claimed  # the machinery, only when a job runs here

    with _draining() as pending:
        pending.extend((alias, job_id) for job_id in job_ids)
        waited: set[tuple[str, int]] = set()  # requeued since the last job ran
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
            if not claimed and _waits(job_alias, job_id):
                # A workflow step whose upstream jobs are still to run in this drain (a step's
                # dynamic fan-out adds them after it): it is tried again after them, once; a job
                # still waiting when the drain has nothing else left waits for a worker.
                if any(other != (job_alias, job_id) for other in pending if other not in waited):
                    waited.add((job_alias, job_id))
                    pending.append((job_alias, job_id))
                    continue
                logger.info("immediate mode left job waiting job_id=%s (its upstream jobs have not ended)", job_id)
                continue
            if not claimed:
                # Scheduled for later, its queue paused, its fair key at its cap, or already taken: a worker runs it.
                logger.info(
                    "immediate mode left job waiting job_id=%s (not due, queue paused, fair key at its cap, or taken)",
                    job_id,
                )
                continue
            run = run_claimed(job_alias, claimed[0])
            waited.clear()
            ran += 1
            _log_immediate(run)


def _waits(alias: str, job_id: int) -> bool:
    """Whether the job is a workflow step still waiting for its upstream jobs."""
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["read_job_state"], {"id": job_id})
        row = cursor.fetchone()
    return row is not None and row[0] == JobState.WAITING


def _log_immediate(run: JobRun) -> None:
    if run.state is JobState.COMPLETED:
        logger.info("immediate mode ran job job_id=%s kind=%s state=completed", run.job_id, run.kind)
    elif run.state in (JobState.RETRYABLE, JobState.SCHEDULED):
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
