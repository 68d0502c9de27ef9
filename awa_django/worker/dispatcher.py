"""One queue's dispatcher: permits first, then the claim, then one task per job.

``poll_once`` follows DESIGN.md's six phases exactly:

1. pre-acquire permits without blocking (hard slots; or local min_workers slots, then overflow);
2. apply the queue's rate limit by dropping surplus permits;
3. claim at most that many jobs from the database;
4. release the permits the database did not fill;
5. if nothing was claimed, clear the queue's demand so an empty queue stops contending;
6. dispatch each job with exactly one permit, released when its task ends, after its final
   state is written: a row marked running always holds a slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from awa_django.concurrency import Permit, TokenBucket, release_all
from awa_django.sql import statements
from awa_django.worker.context import ClaimedJob
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff

if TYPE_CHECKING:
    from awa_django.worker.config import QueueConfig
    from awa_django.worker.runtime import Worker

logger = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, worker: Worker, config: QueueConfig) -> None:
        self.worker = worker
        self.queue = config.name
        self.config = config
        self.bucket: TokenBucket | None = None
        self.wake = asyncio.Event()
        # True while the last poll filled every permit it had (there may be more work, and it
        # waits for capacity); a poll that found fewer rows than permits waits for a NOTIFY.
        self.hungry = True
        self.claimed_total = 0
        self.apply(config)

    def apply(self, config: QueueConfig) -> None:
        """Take a new configuration of this queue (the allocator is reconfigured separately)."""
        self.config = config
        if config.rate_limit is None:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = TokenBucket(config.rate_limit, config.rate_burst)
        else:
            self.bucket.reconfigure(config.rate_limit, config.rate_burst, now=time.monotonic())
        self.wake.set()

    @property
    def wanted(self) -> int:
        """How many permits to ask for: the most this queue could ever run at once here."""
        allocator = self.worker.allocator
        if allocator.global_max_workers is None:
            return self.config.max_workers
        return allocator.global_max_workers

    async def run(self) -> None:
        backoff = Backoff()
        while not self.worker.stopping:
            self.wake.clear()
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

    async def poll_once(self) -> float:
        """One round of the six phases; returns how long to wait before the next (0 = at once)."""
        worker = self.worker
        if self.config.paused:
            worker.allocator.clear_demand(self.queue)
            self.hungry = False
            return worker.config.poll_interval
        # 1. pre-acquire, never blocking.
        permits = worker.allocator.try_acquire(self.queue, self.wanted)
        if not permits:
            self.hungry = True  # waiting for capacity: a released permit wakes us
            return worker.config.poll_interval
        # 2. the rate limit drops surplus permits.
        now = time.monotonic()
        if self.bucket is not None:
            allowed = self.bucket.take(len(permits), now)
            if allowed < len(permits):
                worker.release_quietly(permits[allowed:])
                permits = permits[:allowed]
            if not permits:
                self.hungry = False
                return max(self.bucket.seconds_until(1, now), 0.001)
        # 3. claim at most that many rows.
        try:
            rows = await self._claim(len(permits))
        except BaseException:
            worker.release_quietly(permits)
            if self.bucket is not None:
                self.bucket.refund(len(permits))
            raise
        # 4. release what the database did not fill.
        unfilled = len(permits) - len(rows)
        if unfilled:
            worker.release_quietly(permits[len(rows) :])
            if self.bucket is not None:
                self.bucket.refund(unfilled)
        # 5. an empty queue stops contending.
        if not rows:
            worker.allocator.clear_demand(self.queue)
            self.hungry = False
            return worker.config.poll_interval
        # 6. dispatch each job with exactly one permit.
        self.claimed_total += len(rows)
        for row, permit in zip(rows, permits, strict=False):
            worker.dispatch(ClaimedJob(*row), permit)
        self.hungry = unfilled == 0
        return 0 if self.hungry else worker.config.poll_interval

    def claim_params(self, limit: int) -> dict[str, Any]:
        deadline = None if self.config.deadline is None else timedelta(seconds=self.config.deadline)
        return {"queue": self.queue, "limit": limit, "deadline": deadline}

    async def _claim(self, limit: int) -> list[tuple[Any, ...]]:
        async with self.worker.pool.connection() as conn:
            cursor = await conn.execute(statements["claim_jobs"], self.claim_params(limit))
            return await cursor.fetchall()


__all__ = ["Dispatcher", "Permit", "release_all"]
