"""The plain claim source: claim_jobs over a queue's priority lanes, from their cursors.

Every queue starts here (claims.py: the ``ClaimSource`` protocol). The claim takes up to one row per
permit in (priority, run_at, id) order, each lane's scan starting after its cursor (lanes.py: why,
and how the look-behind rewinds a lane). It says the queue ran dry when it came back short, or when
it filled its permits and its ``more`` column says no due job was left past its rows. Only a weighted
worker asks (claim_jobs): there a runner that believes in backlog holds overflow slots away from the
other queues until a claim comes back empty. A hard-reserved worker's queue has its own slots, so it
claims with claim_jobs_unprobed, whose ``more`` is unknown: a claim that fills leaves the runner
looking again, and the next one (the writer's hand-over, as a job ends) says whether it ran dry. The
probe's CTEs cost every claim's plan, and an idle queue's pickup tail with it (claim_jobs.sql).

A queue shares its slots by fair key from the moment it has something to share (worker/keyed.py):
its settings give a key a cap or a weight of its own, its backlog holds a key other than the default
one when it first claims (one index descent, before the first claim), or a claim returns a job with
such a key. The source then replaces itself with a ``KeyedSource`` that keeps its lane cursors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Permit
from awa_django.concurrency.keyconfig import QueueKeySettings
from awa_django.context import ClaimedJob
from awa_django.worker.claims import Claim, Looks, Replace, run_statement
from awa_django.worker.keyed import KeyedSource, first_key_other_than_default, has_keyed_backlog
from awa_django.worker.lanes import LaneCursors

logger = logging.getLogger(__name__)


class PlainSource:
    """claim_jobs from the lane cursors; see the module docstring."""

    rewinds_lanes = True
    probe_sees_all = True
    hands_over = True

    def __init__(self, queue: str, worker: str, replace: Replace, weighted: Callable[[], bool] = bool) -> None:
        self.queue = queue
        self.worker = worker  # host:pid, stored as the claimed rows' attempted_by
        # Whether the worker shares an overflow pool (weighted mode), where a runner's demand holds
        # slots away from other queues: only there is the `more` probe worth its cost.
        self._weighted = weighted
        self.lanes = LaneCursors()
        self._replace = replace
        self._settings = QueueKeySettings()
        self._keys_looked = False  # whether the backlog was looked at for keys (before the first claim)
        self._replaced = False

    def announced(self) -> None:
        pass

    async def discover(self, pool: AsyncConnectionPool, looks: Looks) -> None:
        """Before the queue's first claim: a backlog with a key other than the default one makes
        it share by key from that claim, not from the claim that would first return such a job."""
        if self._keys_looked:
            return
        self._keys_looked = True
        if await has_keyed_backlog(pool, self.queue):
            self._become_keyed()

    async def ready(self, pool: AsyncConnectionPool, looks: Looks, since: Callable[[], bool]) -> bool | None:
        return True

    def next_look(self, now: float) -> float | None:
        return None

    def keepable(self, permits: list[Permit]) -> list[Permit]:
        return permits

    def plan(self, permits: Sequence[Permit], deadline: float | None, seen: int) -> Claim | None:
        params: dict[str, Any] = {
            "queue": self.queue,
            "limit": len(permits),
            "deadline": None if deadline is None else timedelta(seconds=deadline),
            "worker": self.worker,
            **self.lanes.params(),
        }
        statement = "claim_jobs" if self._weighted() else "claim_jobs_unprobed"
        return Claim(self, permits, statement, params, seen)

    async def run(self, pool: AsyncConnectionPool, claim: Claim, looks: Looks) -> list[ClaimedJob]:
        looks.look_began()
        return await run_statement(pool, claim)

    def settle(self, claim: Claim, jobs: Sequence[ClaimedJob] | None) -> bool | None:
        if jobs is None:
            self.lanes.claim_failed(claim.params)
            return None
        self.lanes.advance(jobs, claim.params)
        if jobs and first_key_other_than_default(jobs) is not None:
            self._become_keyed()
        if len(jobs) < len(claim.permits) or claim.rows.more is False:
            return False  # it came back short, or filled its permits and left no due job
        return None

    def attempt_permits(
        self, jobs: Sequence[ClaimedJob], permits: Sequence[Permit], claimable: Callable[[], None]
    ) -> Sequence[Permit]:
        return permits

    def key_freed(self, key: str) -> bool:
        return False

    def configure(self, settings: QueueKeySettings) -> bool:
        """A cap or a key weight of its own starts keyed claiming."""
        self._settings = settings
        if settings.keyed:
            self._become_keyed()
        return False

    def _become_keyed(self) -> None:
        if self._replaced:  # a claim planned before the switch came back after it
            return
        self._replaced = True
        logger.info("queue has fair keys, sharing its slots by key queue=%s", self.queue)
        self._replace(KeyedSource(self.queue, self._settings, self.worker, self.lanes))
