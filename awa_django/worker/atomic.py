"""Atomic attempts (``@job(atomic=True)``): a handler's database writes commit with its completion.

The handler runs inside ``transaction.atomic()`` on the jobs' database, on the Django connection of
the thread that runs it. When it returns, its completion is written in that same transaction, before
it commits, by the statements every finalising write uses (``writes.outcome_writes``: complete_job,
or finalize_jobs for a result or progress), guarded by (id, running, run_lease). So:

- the guard accepts: the handler's writes, the completion, the jobs it enqueued, the workflow
  releases the completion causes (awa_release_jobs runs inside complete_job) and its
  ``transaction.on_commit`` callbacks all take effect with one COMMIT, the handler's own (a
  callback that raises after it is logged and the ones after it still run: the job stays
  completed, and is not run again);
- the guard refuses (the job was rescued, cancelled or handed back while the handler ran): the
  transaction rolls back with the handler's writes, and the attempt ends as a refused write does
  (``Outcome.settled`` False), leaving no follow-up;
- the handler raises (a retry, a snooze, a cancel, a failure), returns a value that cannot be
  stored, or marked its transaction for rollback: the transaction rolls back, and the outcome goes
  to the usual writer (the worker's batch writer, or in-process execution) on its own.

A durable job's sleep or wait (``durable.Parked``) is not a rollback: its parking outcome is written
in the transaction, guarded the same way, and commits with the handler's writes and step records.

A worker killed anywhere before the COMMIT leaves an open transaction that Postgres rolls back when
the connection drops; the rescue then runs the job again on a clean slate. Killed after it, the job
is completed and nothing runs again. That is the exactly-once of the handler's database writes.

Cost: the completion is one statement on the connection the handler already holds, committed by
the handler's own COMMIT: no other connection, no other commit. An attempt whose handler sent
nothing to the jobs' database (no statement, so no transaction began: an early return, a cache
hit) and registered no ``on_commit`` callback has nothing to commit with its completion: its
transaction is left empty and its completion goes to the usual writer, batched as a plain
attempt's (``settled`` None), so such an attempt costs what a plain one does. Whether anything was
sent is the connection's own transaction status (libpq's, no round trip). Used by ``Executor`` (the worker's
thread pool) and ``InlineExecutor`` (immediate mode, ``run_jobs``), the one home of the rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from django.db import transaction
from psycopg.pq import TransactionStatus

from awa_django.context import ATOMIC_ENTRY_KEY as ATOMIC_ENTRY_KEY
from awa_django.context import COMPLETED, ClaimedJob, JobContext, Outcome
from awa_django.dbparams import execute_prepared
from awa_django.durable import Parked
from awa_django.exceptions import TerminalError
from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.worker.writes import Written, outcome_writes

logger = logging.getLogger(__name__)


class RolledBackError(RuntimeError):
    """An atomic handler returned with its transaction marked for rollback
    (``transaction.set_rollback(True)``): its completion cannot commit without its writes."""


class _NotCompleted(Exception):  # noqa: N818 (a signal out of the atomic block, never shown)
    """Carries an outcome other than a completion out of the atomic block, rolling it back."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.state)
        self.outcome = outcome


class _Refused(Exception):  # noqa: N818 (a signal out of the atomic block, never shown)
    """The lease guard refused the completion: roll the handler's writes back."""


def run_atomic(
    alias: str,
    call: Callable[[], Any],
    context: JobContext,
    completed_with: Callable[[ClaimedJob, Any], Outcome],
) -> Outcome:
    """Run ``call`` (the handler, bound to its args) in a transaction on Django's connection
    ``alias`` and write its completion in it (see the module docstring).

    Returns the outcome: ``settled`` True (completed and committed), False (refused by the lease
    guard, rolled back), or None (not a completion: rolled back, for the usual writer to write).
    What the handler raises propagates, after the rollback, for the caller to map to an outcome.
    ``completed_with`` turns a return value into an outcome (a completion with the stored
    result, or a failure naming a value Postgres cannot store).

    Inside an outer transaction (a test's, immediate mode within one) the block is a savepoint:
    nothing commits here, so the deferred constraints the COMMIT would check are checked before the
    completion is written (an attempt whose writes break one is retried, as in a worker), and no
    callback is touched (they run at the outer COMMIT, as Django runs them).
    """
    job = context.job
    connection = transaction.get_connection(alias)
    outermost = not connection.in_atomic_block
    committed: list[bool] = []  # the first on_commit callback of the transaction notes its COMMIT
    try:
        with transaction.atomic(using=alias):
            if outermost:
                transaction.on_commit(partial(committed.append, True), using=alias)
            context.atomic_depth = len(connection.atomic_blocks)  # run_atomic's own block counts
            try:
                result = _call(call, job)
            except Parked:
                result = None
            if context.parked is not None:  # a durable sleep or wait: parked with its steps, in one COMMIT
                outcome = context.parked
                _check_sendable(connection, job)
                context.finishing = True
                if not outermost:
                    connection.check_constraints()
                if not write_outcome(alias, job, outcome, context.progress_json):
                    raise _Refused
                if outermost:
                    _log_callbacks(connection, job)
                return replace(outcome, settled=True)
            outcome = COMPLETED if result is None else completed_with(job, result)
            if outcome.state is not JobState.COMPLETED:
                raise _NotCompleted(outcome)
            _check_sendable(connection, job)
            if outermost and _untouched(connection):
                return outcome  # nothing to commit with it: the usual writer's, as a plain attempt's
            context.finishing = True  # the heartbeat leaves the row alone from here
            if not outermost:
                connection.check_constraints()  # what this block's COMMIT would check, were it one
            if not write_outcome(alias, job, outcome, context.progress_json):
                raise _Refused
            if outermost:
                _log_callbacks(connection, job)
    except _NotCompleted as not_completed:
        return not_completed.outcome
    except _Refused:
        return replace(outcome, settled=False)
    except BaseException:
        if not committed:
            raise
        # After the COMMIT: a callback of the transaction raised past _log_callbacks (a
        # BaseException); the job is completed with its writes.
        logger.exception(
            "an on_commit callback of an atomic handler raised after its transaction committed; the job is "
            "completed job_id=%s kind=%s attempt=%s",
            job.id,
            job.kind,
            job.attempt,
        )
    return replace(outcome, settled=True)


NESTED_DURABLE = "A durable atomic block cannot be nested"  # the start of Django's RuntimeError text


def _call(call: Callable[[], Any], job: ClaimedJob) -> Any:
    """The handler's call; Django's refusal of a durable block inside it becomes a TerminalError
    that says why (it would fail the same way at every attempt)."""
    try:
        return call()
    except RuntimeError as exc:
        if not str(exc).startswith(NESTED_DURABLE):
            raise
        raise TerminalError(
            f"job {job.kind!r} is atomic=True, so its handler already runs inside transaction.atomic(), and "
            "a transaction.atomic(durable=True) block inside it cannot be durable: drop durable=True (its writes "
            "then commit with the job's completion), or drop atomic=True from the job"
        ) from exc


def _check_sendable(connection: Any, job: ClaimedJob) -> None:
    """Before the completion is written: the handler left its transaction able to commit. Raises
    RolledBackError naming what the handler did otherwise."""
    if connection.closed_in_transaction:
        raise RolledBackError(
            f"the handler of {job.kind!r} closed its database connection inside its atomic transaction "
            "(connection.close(), close_old_connections()), which rolled its writes back; an atomic handler's "
            "writes and completion need that connection until their COMMIT: leave closing it to the worker"
        )
    raw = connection.connection
    failed = raw is not None and raw.info.transaction_status == TransactionStatus.INERROR
    if failed or transaction.get_rollback(using=connection.alias):
        raise RolledBackError(
            f"the handler of {job.kind!r} returned with its transaction marked for rollback: it called "
            "transaction.set_rollback(True), or caught a database error (an IntegrityError, say) without an "
            "inner transaction.atomic() around the statement that raised. An atomic handler's completion "
            "commits only with its writes: put such a try/except around `with transaction.atomic():` so that "
            "only that statement rolls back, raise to roll back and retry, or raise awa_django.Cancel to stop"
        )


def _log_callbacks(connection: Any, job: ClaimedJob) -> None:
    """Let every on_commit callback of the transaction run after the COMMIT, each one's exception
    logged: the job is completed by then, and Django would otherwise drop the callbacks after the
    first that raises (among them immediate mode's run of the jobs the handler enqueued, and the
    Tasks framework's signal). Django keeps them as (savepoint ids, function, robust) tuples."""
    connection.run_on_commit = [
        (sids, partial(_logged, func, job), robust) for sids, func, robust in connection.run_on_commit
    ]


def _logged(func: Callable[[], Any], job: ClaimedJob) -> None:
    try:
        func()
    except Exception:
        logger.exception(
            "an on_commit callback of an atomic handler raised after its transaction committed; the job is "
            "completed, and the callbacks after it still run job_id=%s kind=%s attempt=%s callback=%r",
            job.id,
            job.kind,
            job.attempt,
            func,
        )


def _untouched(connection: Any) -> bool:
    """Inside run_atomic's outermost block: the handler sent nothing on the jobs' connection (no
    transaction began: Django's outermost atomic() only turns autocommit off, and the first
    statement sends BEGIN) and registered no on_commit callback beside run_atomic's own."""
    raw = connection.connection
    return (
        raw is not None and raw.info.transaction_status == TransactionStatus.IDLE and len(connection.run_on_commit) == 1
    )


def write_outcome(alias: str, job: ClaimedJob, outcome: Outcome, progress: str | None) -> bool:
    """Write one attempt's outcome (``progress`` as JSON text, None keeps the stored one) on Django's
    connection ``alias``, in whatever transaction it has open, with the statements the worker's batch
    writer would run for it (``writes.outcome_writes``); False if the (id, running, run_lease) guard
    refused it. The one writer of outcomes on a Django connection: atomic attempts here, in-process
    execution (``awa_django.inline.attempt``) for every other outcome.

    Each statement is prepared on the connection (``dbparams.execute_prepared``, as enqueue's
    insert): Django's cursor binds on the client and sends the whole text, which the server parses
    and plans again for every attempt. A bare completion, the common case, runs ``complete_job``
    (``outcome_writes`` picks it for one completion): complete_jobs with its array parameters is
    planned again at every execution, prepared or not (complete_job.sql). No pipeline: psycopg's
    pipeline mode, which would send BEGIN with the statement when the handler ran none, measured no
    better here (bench/README.md, "Atomic handlers")."""
    written = False
    for name, params in outcome_writes([Written(job, outcome, progress)]):
        written = execute_prepared(alias, statements[name], params) is not None or written
    return written
