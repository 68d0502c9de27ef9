"""Batched finalisation: every finished attempt's state is written in batches, then its slot freed.

Attempts submit their outcome and wait; one writer loop takes everything pending, writes it in at
most two statements (complete_jobs for plain completions, finalize_jobs for the rest), and answers
each waiter with whether its row was still running under its lease. While a batch is being written
the next one accumulates, so batches grow with load and a lone job is written at once. A write
that fails for lack of a database is retried until it succeeds: the rows stay running and their
attempts keep their slots meanwhile.

Each attempt hands its permit to the writer, which releases it once the row is written, or hands
it straight to the queue's next job: in the same round trip as the batch write (psycopg pipeline
mode), it claims that many new rows of the queue, after the finished rows are written. A permit
passes on only as far as the allocator's rules allow (``Allocator.keepable``), so a slot is never
without a covering permit and a queue never holds more than it would get by asking again; this
saves the claim round trip that would otherwise follow each release.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Permit
from awa_django.sql import statements
from awa_django.worker.context import COMPLETED, ClaimedJob, Outcome
from awa_django.worker.db import retrying

logger = logging.getLogger(__name__)

MAX_BATCH = 1000


class HandOver(Protocol):
    """What the writer needs from the worker to pass permits straight to the next jobs."""

    def plan_hand_over(self, permits: Sequence[Permit]) -> dict[str, tuple[list[Permit], dict[str, Any]]]:
        """{queue: (permits to pass on, claim_jobs parameters)}; permits not named are released."""
        ...

    def adopt(self, queue: str, rows: list[tuple[Any, ...]], permits: list[Permit]) -> None:
        """Dispatch the claimed rows with those permits; release the ones left unfilled."""
        ...


@dataclass(slots=True)
class _Finished:
    job: ClaimedJob
    outcome: Outcome
    progress: Any
    permit: Permit | None
    future: asyncio.Future[bool] = field(repr=False)


class Completer:
    def __init__(self, pool: AsyncConnectionPool, hand_over: HandOver | None = None) -> None:
        self.pool = pool
        self.hand_over = hand_over
        self._pending: list[_Finished] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = 0
        self.lost = 0  # writes refused by the (id, running, run_lease) guard
        self.handed_over = 0  # permits passed straight to a next job

    def submit(
        self, job: ClaimedJob, outcome: Outcome, progress: Any = None, permit: Permit | None = None
    ) -> asyncio.Future[bool]:
        """Queue the attempt's final state (and last progress), taking over its permit; the future
        says whether the row was written."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append(_Finished(job, outcome, progress, permit, future))
        self._idle.clear()
        self._wake.set()
        return future

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def wait_idle(self) -> None:
        """Until everything submitted so far is written."""
        await self._idle.wait()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._flush(batch)
            self._idle.set()

    async def _flush(self, batch: list[_Finished]) -> None:
        batch.sort(key=lambda entry: entry.job.id)  # id order: no deadlock with heartbeat batches
        permits = [entry.permit for entry in batch if entry.permit is not None]
        plan = self.hand_over.plan_hand_over(permits) if self.hand_over is not None and permits else {}
        passing = {id(p) for kept, _ in plan.values() for p in kept}
        try:
            written, claimed = await retrying("writing finished jobs", functools.partial(self._write, batch, plan))
        except BaseException:
            for permit in permits:
                permit.release()
            raise
        for entry in batch:
            self._answer(entry, entry.job.id in written)
        for permit in permits:
            if id(permit) not in passing:
                permit.release()
        assert self.hand_over is not None or not plan
        for queue, (kept, _) in plan.items():
            self.handed_over += min(len(kept), len(claimed.get(queue, [])))
            self.hand_over.adopt(queue, claimed.get(queue, []), kept)  # type: ignore[union-attr]

    def _answer(self, entry: _Finished, ok: bool) -> None:
        job = entry.job
        if ok:
            self.written += 1
        else:
            self.lost += 1
            logger.warning(
                "attempt lost before its result was written job_id=%s kind=%s attempt=%s run_lease=%s "
                "(rescued or cancelled meanwhile; the newer state stands)",
                job.id,
                job.kind,
                job.attempt,
                job.run_lease,
            )
        if not entry.future.done():
            entry.future.set_result(ok)

    async def _write(
        self, batch: list[_Finished], plan: dict[str, tuple[list[Permit], dict[str, Any]]]
    ) -> tuple[set[int], dict[str, list[tuple[Any, ...]]]]:
        """One round trip: the completions, the other outcomes, then the hand-over claims."""
        complete = [e.job for e in batch if e.outcome is COMPLETED and e.progress is None]
        final = [e for e in batch if not (e.outcome is COMPLETED and e.progress is None)]
        async with self.pool.connection() as conn:
            cursors = []
            async with conn.pipeline():
                if complete:
                    params = {"ids": [job.id for job in complete], "leases": [job.run_lease for job in complete]}
                    cursors.append(await conn.execute(statements["complete_jobs"], params))
                if final:
                    cursors.append(await conn.execute(statements["finalize_jobs"], self._final_params(final)))
                claims = {
                    queue: await conn.execute(statements["claim_jobs"], params) for queue, (_, params) in plan.items()
                }
            written = {row[0] for cursor in cursors for row in await cursor.fetchall()}
            claimed = {queue: await cursor.fetchall() for queue, cursor in claims.items()}
        return written, claimed

    @staticmethod
    def _final_params(final: list[_Finished]) -> dict[str, Any]:
        return {
            "ids": [e.job.id for e in final],
            "leases": [e.job.run_lease for e in final],
            "states": [e.outcome.state for e in final],
            "delays": [e.outcome.delay for e in final],
            "errors": [None if e.outcome.error is None else json.dumps(e.outcome.error, default=str) for e in final],
            "refunds": [e.outcome.refund for e in final],
            "progress": [None if e.progress is None else json.dumps(e.progress) for e in final],
            "results": [e.outcome.result for e in final],
        }
