"""Batched finalisation: every finished attempt's state is written in batches, then its slot freed.

Attempts submit their outcome and wait; one writer loop takes everything pending, writes it in at
most two statements (complete_jobs for plain completions, complete_job for a lone one,
finalize_jobs for the rest), and answers
each waiter with whether its row was still running under its lease. While a batch is being written
the next one accumulates, so batches grow with load and a lone job is written at once. A write
still out after ``STUCK_AFTER`` (held up in the database: a row lock, a lock queue) no longer
holds up the others: what came meanwhile goes in a second write, on another connection. A write
that fails for lack of a database is retried until it succeeds: the rows stay running and their
attempts keep their slots meanwhile.

Each attempt hands its permit to the writer, which releases it once the row is written, or hands
it straight to the queue's next job: in the same round trip as the batch write (psycopg pipeline
mode), it claims that many new rows of the queue, after the finished rows are written. A permit
passes on only as far as the allocator's rules allow (``Allocator.keepable``), so a slot is never
without a covering permit and a queue never holds more than it would get by asking again; this
saves the claim round trip that would otherwise follow each release.

One value Postgres refuses must not stop the writer (and with it the worker). Values are
checked before they are submitted (``storable``); should a batch still fail with an error that
is not about the connection (a ``DataError``, say), nothing of it was written (a pipeline is one
transaction, the hand-over claims included), so the batch is split in halves and each written
on its own, down to the one row that fails alone: that job is failed with an error naming the
database's complaint, and every other row is written as it was.

A write the ``(id, running, run_lease)`` guard refuses is named for what happened to the row, read
back by primary key (only then): cancelled or deleted while running is ``discarded`` (the
operator's decision stands), a job this worker handed back at shutdown is ``handed_back``, and only
a row rescued under a newer lease is ``lost`` (the attempt's outcome could not be written).

An atomic handler's outcome comes already written, or refused, by its own transaction
(``Outcome.settled``, awa_django.worker.atomic): the writer writes nothing for it, answers it as
written or refused (naming the refusal the same way), and passes its permit on like any other.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Permit, held_before, release_all
from awa_django.context import ClaimedJob, Outcome
from awa_django.observability.joblog import log_job
from awa_django.observability.sink import REFUSALS
from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.storable import escape_text
from awa_django.worker.claims import Claim
from awa_django.worker.db import retrying
from awa_django.worker.keyed import freed_keys
from awa_django.worker.writes import outcome_writes

logger = logging.getLogger(__name__)

MAX_BATCH = 1000
# A write held up in the database (a row lock another transaction keeps, a lock queue) must not hold
# up every other finished attempt: once each write in flight has been out this long, the outcomes
# that came meanwhile go in a write of their own, on another connection, up to WRITES at once.
# Not sooner: a second write while the first is on its way costs a batch's fixed work for the same
# jobs (two halves of a 50-job drain ran at 0.95x the rate with 1.33x the CPU per job:
# bench/README.md, "Two writes in flight").
WRITES = 2  # of the pool's connections (POOL_SIZE, 4 by default), at most two wait on writes
STUCK_AFTER = 0.5  # seconds

# What a batch write can fail with, once transient (connection) errors have been retried away:
# the database refusing a value or a statement, or psycopg refusing to encode a parameter.
WRITE_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error, UnicodeError, ValueError, TypeError)


class HandOver(Protocol):
    """What the writer needs to pass permits straight to the next jobs (the queues' runners)."""

    def plan_hand_over(self, permits: Sequence[Permit], releasing: frozenset[str]) -> dict[str, Claim]:
        """{queue: the claim to run after the writes}; permits not named in it are released.
        ``releasing``: the queues of the batch's workflow steps, whose ends may make a dependent
        available in the same transaction (a chain's next step, in its queue)."""
        ...

    def adopt(self, queue: str, jobs: list[ClaimedJob], claim: Claim, *, claim_ran: bool) -> None:
        """Run the claimed jobs on the claim's permits; release the ones left unfilled. With
        ``claim_ran`` False the claim never ran (its batch was refused): the queue may still have jobs."""
        ...

    def abandon(self, queue: str, claim: Claim) -> None:
        """The write carrying the claim stopped before it answered (the worker stopping); the
        writer releases the claim's permits."""
        ...


@dataclass(slots=True)
class _Finished:
    job: ClaimedJob
    outcome: Outcome
    progress: str | None  # JSON text, None keeps the stored progress
    permit: Permit | None
    future: asyncio.Future[bool] = field(repr=False)
    answered: bool = False


class Completer:
    def __init__(self, pool: AsyncConnectionPool, hand_over: HandOver | None = None) -> None:
        self.pool = pool
        self.hand_over = hand_over
        self._pending: list[_Finished] = []
        # The batches being written (at most WRITES, each on its own connection), and when each began (monotonic).
        self._flushing: dict[asyncio.Task[None], tuple[list[_Finished], float]] = {}
        self._recheck_at: asyncio.TimerHandle | None = None
        # Attempts whose await of their future was cancelled (the worker stopping) while the row
        # was still on its way: job id -> a future answered with the write, like the first was.
        self._late: dict[int, asyncio.Future[bool]] = {}
        self._stopped = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = 0
        # Writes refused by the (id, running, run_lease) guard, by why (sink.REFUSALS):
        self.discarded = 0  # cancelled or deleted while running
        self.handed_back = 0  # handed back by this worker at shutdown
        self.lost = 0  # rescued under a newer lease: the outcome could not be written
        self.handed_over = 0  # permits passed straight to a next job
        self.released: set[int] = set()  # ids this worker handed back at shutdown (note_handed_back)
        self._refusals: dict[int, str] = {}  # job id: why its write was refused, until refusal() reads it

    def submit(
        self, job: ClaimedJob, outcome: Outcome, progress: str | None = None, permit: Permit | None = None
    ) -> asyncio.Future[bool]:
        """Queue the attempt's final state (and last progress, as JSON text), taking over its permit;
        the future says whether the row was written (cancelled if the writer stopped first)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append(_Finished(job, outcome, progress, permit, future))
        self._idle.clear()
        self._wake.set()
        return future

    def note_handed_back(self, ids: Sequence[int]) -> None:
        """The supervisor handed these jobs back at shutdown: a late outcome of theirs is no loss."""
        self.released.update(ids)

    def refusal(self, job_id: int) -> str:
        """Why the job's refused write was refused (one of ``sink.REFUSALS``); asked once, after its future."""
        return self._refusals.pop(job_id, "lost")

    @property
    def pending(self) -> int:
        return len(self._pending)

    def until_written(self, job_id: int) -> asyncio.Future[bool]:
        """A future answered when the job's submitted outcome is written or refused (cancelled if
        the writer stops first), for an attempt whose own future was cancelled while it waited: the
        attempts await their futures without ``asyncio.shield`` (5 % of the per-job Python), so a
        cancelled attempt cancels its future, and waits for the write through this instead."""
        late = asyncio.get_running_loop().create_future()
        writing = (entry for batch, _ in self._flushing.values() for entry in batch)
        waiting = any(entry.job.id == job_id and not entry.answered for entry in (*self._pending, *writing))
        if not waiting:
            late.set_result(True)  # answered already (its future was cancelled, so unanswered there)
        elif self._stopped:
            late.cancel()
        else:
            self._late[job_id] = late
        return late

    async def wait_idle(self) -> None:
        """Until everything submitted so far is written."""
        await self._idle.wait()

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending and len(self._flushing) < WRITES:
                    if self._flushing:
                        wait = self._since_last_write() - STUCK_AFTER
                        if wait < 0:  # the last write is on its way: look again when it is late
                            self._recheck(-wait)
                            break
                    batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                    task = asyncio.create_task(self._flush_logged(batch))
                    self._flushing[task] = (batch, time.monotonic())
                    task.add_done_callback(self._flushed)
                if not self._pending and not self._flushing:
                    self._idle.set()
        finally:
            # Stopped (the worker closing): nobody waits on a write that will never come.
            self._stopped = True
            if self._recheck_at is not None:
                self._recheck_at.cancel()
            flushing = list(self._flushing)
            for task in flushing:
                task.cancel()
            if flushing:
                await asyncio.wait(flushing)
            pending, self._pending = self._pending, []
            for entry in pending:
                if entry.permit is not None:
                    entry.permit.release()
                entry.future.cancel()
            late, self._late = self._late, {}
            for future in late.values():
                future.cancel()
            self._idle.set()

    def _since_last_write(self) -> float:
        """Seconds since the newest write in flight started."""
        return time.monotonic() - max(started for _, started in self._flushing.values())

    def _recheck(self, delay: float) -> None:
        """Wake the writer loop in ``delay`` seconds (once; a write ending wakes it sooner)."""
        if self._recheck_at is None:
            self._recheck_at = asyncio.get_running_loop().call_later(delay, self._rechecked)

    def _rechecked(self) -> None:
        self._recheck_at = None
        self._wake.set()

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushing.pop(task, None)
        self._wake.set()

    async def _flush_logged(self, batch: list[_Finished]) -> None:
        try:
            await self._flush(batch)
        except Exception:  # a bug, not a refused value (those are handled in _flush)
            logger.exception(
                "could not write %d finished attempt(s) job_ids=%s; their rows stay running "
                "until the rescue retries them",
                len(batch),
                ",".join(str(entry.job.id) for entry in batch),
            )
            for entry in batch:
                self._answer(entry, False)

    async def _flush(self, batch: list[_Finished]) -> None:
        batch.sort(key=lambda entry: entry.job.id)  # id order: no deadlock with heartbeat batches
        permits = [entry.permit for entry in batch if entry.permit is not None]
        freed = freed_keys(permits)  # read before the hand-over rebinds the permits
        plan = {}
        if self.hand_over is not None and permits:
            releasing = frozenset(entry.job.queue for entry in batch if entry.job.workflow_id is not None)
            plan = self.hand_over.plan_hand_over(permits, releasing)
        passing = {id(p) for claim in plan.values() for p in held_before(claim.permits)}
        try:
            written, claimed = await retrying(
                "writing finished jobs", functools.partial(self._write, batch, plan, freed)
            )
        except WRITE_ERRORS as exc:
            # Nothing was written nor claimed: write the rows apart, pass no permit on.
            logger.error("a batch of %d finished attempt(s) was refused error=%r; writing it in parts", len(batch), exc)
            assert self.hand_over is not None or not plan
            for queue, claim in plan.items():
                self.hand_over.adopt(queue, [], claim, claim_ran=False)  # type: ignore[union-attr]
            plan, passing, claimed = {}, set(), {}
            try:
                written = await self._write_apart(batch, exc)
            except BaseException:
                for permit in permits:
                    permit.release()
                raise
        except BaseException:
            for permit in permits:
                permit.release()
            for queue, claim in plan.items():  # the hand-over's own, beyond the batch's (runner._top_up)
                release_all(claim.permits)
                self.hand_over.abandon(queue, claim)  # type: ignore[union-attr]
            raise
        refused = [entry for entry in batch if entry.job.id not in written]
        reasons = await self._refusal_reasons(refused) if refused else {}
        for entry in batch:
            self._answer(entry, entry.job.id in written, reasons.get(entry.job.id, "lost"))
        for permit in permits:
            if id(permit) not in passing:
                permit.release()
        assert self.hand_over is not None or not plan
        for queue, claim in plan.items():
            taken = claimed.get(queue, [])
            self.handed_over += min(len(claim.permits), len(taken))
            logger.debug(
                "handed over queue=%s written=%d permits=%d claimed=%d",
                queue,
                len(written),
                len(claim.permits),
                len(taken),
            )
            self.hand_over.adopt(queue, taken, claim, claim_ran=True)  # type: ignore[union-attr]

    async def _write_apart(self, batch: list[_Finished], error: BaseException) -> set[int]:
        """Write a refused batch in halves, recursively; a row refused alone is failed instead."""
        if len(batch) == 1:
            return await self._write_refused(batch[0], error)
        middle = len(batch) // 2
        written: set[int] = set()
        for half in (batch[:middle], batch[middle:]):
            try:
                done, _ = await retrying("writing finished jobs", functools.partial(self._write, half, {}))
            except WRITE_ERRORS as exc:
                done = await self._write_apart(half, exc)
            written |= done
        return written

    async def _write_refused(self, entry: _Finished, error: BaseException) -> set[int]:
        """Fail the job whose outcome the database refused, with the database's complaint."""
        job = entry.job
        cls = type(error)
        reason = (
            f"the worker could not store this attempt's outcome ({entry.outcome.state}): "
            f"{cls.__module__}.{cls.__qualname__}: {error}; the job is failed so that it cannot stop the worker"
        )
        logger.error(
            "outcome refused by the database job_id=%s kind=%s attempt=%s state=%s error=%r; failing the job",
            job.id,
            job.kind,
            job.attempt,
            entry.outcome.state,
            error,
        )
        failed = _Finished(
            job,
            Outcome(
                JobState.FAILED,
                error={
                    "error": escape_text(reason),
                    "attempt": job.attempt,
                    "at": datetime.now(timezone.utc).isoformat(),
                },
            ),
            None,
            None,
            entry.future,
        )
        try:
            done, _ = await retrying("failing a refused outcome", functools.partial(self._write, [failed], {}))
        except WRITE_ERRORS as exc:
            logger.error(
                "could not fail the job either job_id=%s error=%r; its row stays running until the rescue",
                job.id,
                exc,
            )
            return set()
        return done

    async def _refusal_reasons(self, refused: list[_Finished]) -> dict[int, str]:
        """{job id: why the guard refused its write}, from the rows as they are now."""
        try:
            async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(statements["read_refused_jobs"], {"ids": [e.job.id for e in refused]})
                rows = {row["id"]: (row["state"], row["run_lease"]) for row in await cursor.fetchall()}
        except WRITE_ERRORS as exc:
            logger.warning("could not read back %d refused row(s) error=%r; counting them lost", len(refused), exc)
            return {}
        reasons = {}
        for entry in refused:
            job = entry.job
            state, lease = rows.get(job.id, (None, None))
            if job.id in self.released:  # whoever claimed it since runs it under a newer lease
                reasons[job.id] = "handed_back"
            elif state is None or (state == JobState.CANCELLED and lease == job.run_lease):
                reasons[job.id] = "discarded"
            else:
                reasons[job.id] = "lost"
        return reasons

    def _answer(self, entry: _Finished, ok: bool, refusal: str = "lost") -> None:
        job = entry.job
        entry.answered = True
        if ok:
            self.written += 1
        else:
            if refusal == "discarded":
                self.discarded += 1
            elif refusal == "handed_back":
                self.handed_back += 1
            else:
                self.lost += 1
            self._refusals[job.id] = refusal
            log_job(
                refusal,
                job_id=job.id,
                kind=job.kind,
                queue=job.queue,
                attempt=job.attempt,
                note=f"{REFUSALS[refusal]}; its outcome ({entry.outcome.state}) was not written "
                f"(run_lease={job.run_lease})",
                workflow_id=job.workflow_id,
            )
        if not entry.future.done():
            entry.future.set_result(ok)
        if self._late:
            late = self._late.pop(job.id, None)
            if late is not None and not late.done():
                late.set_result(ok)

    async def _write(
        self,
        batch: list[_Finished],
        plan: Mapping[str, Claim],
        freed: Mapping[str, Any] | None = None,
    ) -> tuple[set[int], dict[str, list[ClaimedJob]]]:
        """One round trip: the completions, the other outcomes, the NOTIFY of the capped keys whose
        attempts ended (``freed``, keyed.freed_keys), then the hand-over claims. A batch written in
        parts announces no key: each worker's own completions and settings reload unblock it."""
        writes = outcome_writes([entry for entry in batch if entry.outcome.settled is None])
        settled = {entry.job.id for entry in batch if entry.outcome.settled}  # written in their own transactions
        if not writes and not plan and not (freed is not None and freed["keys"]):
            return settled, {}
        async with self.pool.connection() as conn:
            cursors = []
            claims = {}
            async with conn.pipeline():
                for name, params in writes:
                    cursors.append(await conn.execute(statements[name], params))
                if freed is not None and freed["keys"]:
                    await conn.execute(statements["notify_freed_keys"], freed)
                for queue, claim in plan.items():
                    cursor = conn.cursor(row_factory=claim.rows)
                    claims[queue] = await cursor.execute(statements[claim.statement], claim.params)
            written = {row[0] for cursor in cursors for row in await cursor.fetchall()}
            claimed = {queue: await cursor.fetchall() for queue, cursor in claims.items()}
        return written | settled, claimed
