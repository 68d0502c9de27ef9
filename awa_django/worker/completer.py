"""Batched finalisation: every finished attempt's state is written in batches, then its slot freed.

Attempts submit their outcome and wait; one writer loop takes everything pending, writes it in at
most two statements (complete_jobs for plain completions, finalize_jobs for the rest), and answers
each waiter with whether its row was still running under its lease. While a batch is being written
the next one accumulates, so batches grow with load and a lone job is written at once. A write
that fails for lack of a database is retried until it succeeds: the rows stay running and their
attempts keep their slots meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa_django.sql import statements
from awa_django.worker.context import COMPLETED, ClaimedJob, Outcome
from awa_django.worker.db import retrying

logger = logging.getLogger(__name__)

MAX_BATCH = 1000


class Completer:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self._complete: list[tuple[ClaimedJob, asyncio.Future[bool]]] = []
        self._final: list[tuple[ClaimedJob, Outcome, Any, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = 0
        self.lost = 0  # writes refused by the (id, running, run_lease) guard

    def submit(self, job: ClaimedJob, outcome: Outcome, progress: Any = None) -> asyncio.Future[bool]:
        """Queue the attempt's final state (and last progress); the future says whether the row was written."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if outcome is COMPLETED and progress is None:
            self._complete.append((job, future))
        else:
            self._final.append((job, outcome, progress, future))
        self._idle.clear()
        self._wake.set()
        return future

    @property
    def pending(self) -> int:
        return len(self._complete) + len(self._final)

    async def wait_idle(self) -> None:
        """Until everything submitted so far is written."""
        await self._idle.wait()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._complete or self._final:
                complete, self._complete = self._complete[:MAX_BATCH], self._complete[MAX_BATCH:]
                final, self._final = self._final[:MAX_BATCH], self._final[MAX_BATCH:]
                if complete:
                    written = await retrying("complete_jobs", functools.partial(self._write_complete, complete))
                    self._answer([(job, fut) for job, fut in complete], written)
                if final:
                    written = await retrying("finalize_jobs", functools.partial(self._write_final, final))
                    self._answer([(job, fut) for job, _, _, fut in final], written)
            self._idle.set()

    def _answer(self, batch: list[tuple[ClaimedJob, asyncio.Future[bool]]], written: set[int]) -> None:
        for job, future in batch:
            ok = job.id in written
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
            if not future.done():
                future.set_result(ok)

    async def _write_complete(self, batch: list[tuple[ClaimedJob, asyncio.Future[bool]]]) -> set[int]:
        batch = sorted(batch, key=lambda entry: entry[0].id)  # id order: no deadlock with heartbeats
        params = {"ids": [job.id for job, _ in batch], "leases": [job.run_lease for job, _ in batch]}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(statements["complete_jobs"], params)
            return {row[0] for row in await cursor.fetchall()}

    async def _write_final(self, batch: list[tuple[ClaimedJob, Outcome, Any, asyncio.Future[bool]]]) -> set[int]:
        batch = sorted(batch, key=lambda entry: entry[0].id)
        params = {
            "ids": [job.id for job, _, _, _ in batch],
            "leases": [job.run_lease for job, _, _, _ in batch],
            "states": [outcome.state for _, outcome, _, _ in batch],
            "delays": [outcome.delay for _, outcome, _, _ in batch],
            "errors": [None if o.error is None else json.dumps(o.error, default=str) for _, o, _, _ in batch],
            "refunds": [outcome.refund for _, outcome, _, _ in batch],
            "progress": [None if p is None else json.dumps(p) for _, _, p, _ in batch],
            "results": [outcome.result for _, outcome, _, _ in batch],
        }
        async with self.pool.connection() as conn:
            cursor = await conn.execute(statements["finalize_jobs"], params)
            return {row[0] for row in await cursor.fetchall()}
