"""One queue's dispatcher: permits first, then the claim, then one task per job.

A dispatcher asks for permits only while its queue is believed to have backlog (``hungry``)
and has rate tokens, so what the allocator records as demand means "could use a slot now".
An idle dispatcher issues no query: it sleeps until a NOTIFY for its queue, the worker's
backlog probe (one query per poll interval for every idle queue), a settings change, or a
freed permit that the allocator says it may take.

``poll_once`` follows the six phases of docs/design.md ("Claiming and dispatching") exactly:

1. pre-acquire permits without blocking (hard slots; or local min_workers slots, then overflow);
2. apply the queue's rate limit by dropping surplus permits;
3. claim at most that many jobs from the database;
4. release the permits the database did not fill;
5. if the claim came back short, clear the queue's demand so an empty queue stops contending;
6. dispatch each job with exactly one permit, released when its task ends, after its final
   state is written: a row marked running always holds a slot.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator, Permit, TokenBucket, release_all
from awa_django.sql import statements
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.context import ClaimedJob
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff
from awa_django.worker.lanes import LaneCursors

logger = logging.getLogger(__name__)


class DispatchHost(Protocol):
    """What a dispatcher needs from the worker: the shared allocator and pool, and where claimed
    jobs and unused permits go."""

    config: WorkerConfig
    allocator: Allocator
    pool: AsyncConnectionPool
    stopping: bool

    def give_back(self, permits: Iterable[Permit]) -> None:
        """Release permits a poll could not use."""
        ...

    def dispatch(self, job: ClaimedJob, permit: Permit) -> None:
        """Run a claimed job on its permit (released once the job's final state is written)."""
        ...

    def wake_waiting(self) -> None:
        """Wake the dispatchers a free permit would now be granted to."""
        ...


class Dispatcher:
    def __init__(self, worker: DispatchHost, config: QueueConfig) -> None:
        self.worker = worker
        self.queue = config.name
        self.config = config
        self.bucket: TokenBucket | None = None
        self.wake = asyncio.Event()
        # True while the queue is believed to have backlog: after a claim that filled every
        # permit, a NOTIFY, the worker's backlog probe (which runs first thing at start), or a
        # settings change (``nudge``). Only then
        # does it ask for permits, so an empty queue never contends; a claim that comes back
        # short sets it False and the dispatcher sleeps until nudged.
        self.hungry = False
        self.nudges = 0
        self.polling = False
        self.claimed_total = 0
        # Where each priority lane's claim scan starts (worker/lanes.py: why, and the look-behind).
        self.lanes = LaneCursors()
        self.hand_over_params_sent: dict[str, Any] | None = None
        self._apply(config)

    def apply(self, config: QueueConfig) -> None:
        """Take a new configuration of this queue (the allocator is reconfigured separately);
        it may have been unpaused, so look for jobs."""
        self._apply(config)
        self.nudge()

    def _apply(self, config: QueueConfig) -> None:
        self.config = config
        if config.rate_limit is None:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = TokenBucket(config.rate_limit, config.rate_burst, queue=config.name)
        else:
            self.bucket.reconfigure(config.rate_limit, config.rate_burst, now=time.monotonic())

    def nudge(self) -> None:
        """There may be jobs to claim (a NOTIFY, the backlog probe, a settings change): look."""
        self.nudges += 1
        self.hungry = True
        self.wake.set()

    @property
    def wanted(self) -> int:
        """How many permits to ask for: the most this queue could ever run at once here."""
        worker = self.worker
        if worker.config.capacity_scope == "cluster":  # the leader's cap decides how many it gets
            return max(self.config.max_workers, worker.config.global_max_workers or 0)
        if worker.allocator.global_max_workers is None:
            return self.config.max_workers
        return worker.allocator.global_max_workers

    def set_rate_share(self, rate: float) -> None:
        """Scope "cluster": this worker's part of the queue's rate limit, as the leader split it."""
        if self.config.rate_limit is None or self.bucket is None:
            return
        share = max(rate, 0.01)  # a worker with no part gets no cap either; keep the bucket valid
        burst = (
            max(1, math.ceil(self.config.rate_burst * share / self.config.rate_limit)) if self.config.rate_burst else 0
        )
        if abs(self.bucket.max_rate - share) > 1e-9:
            self.bucket.reconfigure(share, burst, now=time.monotonic())

    async def run(self) -> None:
        backoff = Backoff()
        while not self.worker.stopping:
            self.wake.clear()
            timeout: float | None
            try:
                timeout = await self.poll_once()
                backoff.reset()
            except TRANSIENT_ERRORS as exc:
                delay = backoff.next()
                logger.warning("claim failed queue=%s retrying_in=%.2fs error=%r", self.queue, delay, exc)
                timeout = delay
            if timeout == 0:
                continue
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass

    async def poll_once(self) -> float | None:
        """One round of the six phases; returns how long to wait before the next: 0 = at once,
        None = until woken (by a NOTIFY, the backlog probe, or a permit it may now take)."""
        self.polling = True
        try:
            return await self._poll()
        finally:
            self.polling = False

    async def _poll(self) -> float | None:
        worker = self.worker
        if self.config.paused:
            self.hungry = False
            self.stand_down()
            return None
        if not self.hungry:
            return None
        # A queue without rate tokens cannot use a slot now: it does not contend meanwhile.
        now = time.monotonic()
        wanted = self.wanted
        if self.bucket is not None:
            tokens = self.bucket.available(now)
            if tokens == 0:
                self.stand_down()
                return max(self.bucket.seconds_until(1, now), 0.001)
            wanted = min(wanted, tokens)
        # 1. pre-acquire, never blocking; refused, the queue's demand is recorded and the
        #    allocator names it among the waiting when a permit it may take comes back.
        permits = worker.allocator.try_acquire(self.queue, wanted)
        if not permits:
            return None
        # 2. the rate limit: no more permits than tokens were asked for, so take them all.
        if self.bucket is not None:
            self.bucket.take(len(permits), now)
        # 3. claim at most that many rows.
        nudges = self.nudges
        try:
            rows = await self._claim(len(permits))
        except BaseException:
            worker.give_back(permits)
            if self.bucket is not None:
                self.bucket.refund(len(permits))
            raise
        # 4. release what the database did not fill.
        unfilled = len(permits) - len(rows)
        if unfilled:
            worker.give_back(permits[len(rows) :])
            if self.bucket is not None:
                self.bucket.refund(unfilled)
            # 5. the queue ran dry: it stops contending, unless a NOTIFY came meanwhile.
            if self.nudges == nudges:
                self.hungry = False
                self.stand_down()
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "claimed queue=%s asked=%d claimed=%d ids=%s",
                self.queue,
                len(permits),
                len(rows),
                ",".join(str(row[0]) for row in rows[:20]),
            )
        # 6. dispatch each job with exactly one permit.
        self.claimed_total += len(rows)
        for row, permit in zip(rows, permits, strict=False):
            worker.dispatch(ClaimedJob(*row), permit)
        return 0 if self.hungry else None

    def stand_down(self) -> None:
        """This queue cannot use a slot now: clear its demand, and wake those who now can."""
        self.worker.allocator.clear_demand(self.queue)
        self.worker.wake_waiting()

    def claim_params(self, limit: int) -> dict[str, Any]:
        deadline = None if self.config.deadline is None else timedelta(seconds=self.config.deadline)
        return {"queue": self.queue, "limit": limit, "deadline": deadline, **self.lanes.params()}

    def hand_over_params(self, limit: int) -> dict[str, Any]:
        """claim_params for the writer's hand-over claim; its rows come back through ``claimed``."""
        if self.hand_over_params_sent is not None:  # never answered: its rewinds must not be lost
            self.lanes.claim_failed(self.hand_over_params_sent)
        params = self.claim_params(limit)
        self.hand_over_params_sent = params
        return params

    def claimed(self, rows: list[tuple[Any, ...]], *, ran: bool = True) -> None:
        """The writer's hand-over claim returned these rows (``ran`` False: it never ran): move
        the lane cursors past them."""
        params, self.hand_over_params_sent = self.hand_over_params_sent, None
        if params is None:
            return
        if ran:
            self.lanes.advance(rows, params)
        else:
            self.lanes.claim_failed(params)

    def found_behind(self, priority: int, key: tuple[datetime, int]) -> None:
        """The look-behind saw a due job behind this lane's cursor: the next claim goes back for it."""
        if self.lanes.found_behind(priority, key):
            self.nudge()

    async def _claim(self, limit: int) -> list[tuple[Any, ...]]:
        params = self.claim_params(limit)
        try:
            async with self.worker.pool.connection() as conn:
                cursor = await conn.execute(statements["claim_jobs"], params)
                rows = await cursor.fetchall()
        except BaseException:
            self.lanes.claim_failed(params)
            raise
        self.lanes.advance(rows, params)
        return rows


__all__ = ["DispatchHost", "Dispatcher", "Permit", "release_all"]
