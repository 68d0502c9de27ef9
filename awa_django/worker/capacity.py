"""Capacity scope "cluster": the worker's side (``ClusterMember``) and the leader's (``ClusterLeader``).

Every worker in cluster scope reports, a few times a second, what it holds and wants per queue
and reads back the caps the maintenance leader published for it (one statement,
``report_capacity``); its allocator then enforces those caps locally, so a claim never waits on
another process. The leader plans with ``awa_django.concurrency.cluster.ClusterPlanner`` (the
rule, reduce before grant, and why the sum never passes the global maximum are written there)
inside one transaction that locks every worker's row, and publishes the caps with a lease on the
database clock. A worker whose lease ran out (no leader, or no database) falls back to its floor
caps; a worker that stops reporting is forgotten after ``heartbeat_staleness``, when its running
jobs are rescued.

Both meet the worker through ``CapacityHost``, a narrow door.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator
from awa_django.concurrency.cluster import ClusterPlan, ClusterPlanner, QueueUse, WorkerView
from awa_django.sql import statements
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.db import TRANSIENT_ERRORS

logger = logging.getLogger(__name__)

REPORT_EVERY = 0.2  # seconds between a member's reports
MIN_LEASE = 2.0  # seconds; at least four leader rounds
DEAD_MARGIN = 0.8  # seconds beyond the staleness (and a report interval) before a silent worker's part is freed


def lease_seconds(config: WorkerConfig) -> float:
    return max(MIN_LEASE, 4 * config.maintenance_interval)


class CapacityHost(Protocol):
    """What the cluster capacity parts need from the worker."""

    config: WorkerConfig
    allocator: Allocator
    pool: AsyncConnectionPool
    stopping: bool

    @property
    def instance_key(self) -> str: ...

    def queue_use(self) -> dict[str, tuple[int, int]]:
        """{queue: (held, demand)} for the queues this worker serves."""
        ...

    def apply_rate_shares(self, rates: Mapping[str, float]) -> None: ...

    def wake_waiting(self) -> None: ...

    async def sleep(self, seconds: float) -> None: ...


class ClusterMember:
    def __init__(self, host: CapacityHost) -> None:
        self.host = host
        self.caps: dict[str, int] = {}
        self.floors: dict[str, int] = {}
        self.leased = False
        self.reports = 0
        self._last_lease = -math.inf  # monotonic time of the last report that found a valid lease
        self.host.allocator.set_capacities({})  # nothing until the leader has planned for us

    async def run(self) -> None:
        host = self.host
        while not host.stopping:
            try:
                await self.report_once()
            except TRANSIENT_ERRORS as exc:
                logger.warning("capacity report failed: %r; retrying", exc)
                self._expire_if_due()
            await host.sleep(REPORT_EVERY)

    async def report_once(self) -> None:
        host = self.host
        use = host.queue_use()
        params = {
            "instance_id": host.instance_key,
            "use": json.dumps({q: {"held": held, "demand": demand} for q, (held, demand) in use.items()}),
            "applied": json.dumps(host.allocator.capacities or {}),
            "global_max_workers": host.config.global_max_workers,
        }
        async with host.pool.connection() as conn:
            cursor = await conn.execute(statements["report_capacity"], params)
            row = await cursor.fetchone()
        self.reports += 1
        if row is None:  # pragma: no cover - an upsert always returns its row
            return
        caps, floors, rates, leased = row
        self.floors = {q: int(n) for q, n in (floors or {}).items()}
        if leased:
            self._last_lease = time.monotonic()
            self._apply({q: int(n) for q, n in (caps or {}).items()}, leased=True)
            host.apply_rate_shares({q: float(r) for q, r in (rates or {}).items()})
        else:
            self._expire_if_due()

    def _expire_if_due(self) -> None:
        """Past the lease (the leader or the database is gone): keep only the floor caps."""
        if time.monotonic() - self._last_lease < lease_seconds(self.host.config):
            return
        fallback = {q: min(n, self.caps.get(q, 0)) for q, n in self.floors.items()}
        if self.leased or fallback != self.caps:
            logger.warning(
                "capacity lease expired: keeping only the floor caps %s until a leader plans again", fallback
            )
        self._apply(fallback, leased=False)

    def _apply(self, caps: dict[str, int], *, leased: bool) -> None:
        changed = caps != self.caps
        self.caps, self.leased = caps, leased
        if changed:
            logger.debug("cluster caps applied caps=%s leased=%s", caps, leased)
            self.host.allocator.set_capacities(caps)
            self.host.wake_waiting()

    async def leave(self) -> None:
        """At shutdown, after the jobs are written or handed back: our part returns at once."""
        with contextlib.suppress(*TRANSIENT_ERRORS):
            async with self.host.pool.connection(timeout=2) as conn:
                await conn.execute(statements["delete_worker_capacity"], {"instance_id": self.host.instance_key})


class ClusterLeader:
    """The maintenance leader's part: plan and publish every cluster-scope worker's caps."""

    def __init__(self, host: CapacityHost) -> None:
        self.host = host
        self.planner = ClusterPlanner()
        self.last_plan: ClusterPlan | None = None
        self._said: str | None = None

    async def plan_once(self, conn: psycopg.AsyncConnection[Any]) -> ClusterPlan | None:
        """One planning round, in one transaction; None when no worker is in cluster scope."""
        config = self.host.config
        # A dead worker's part is freed only once its running jobs were surely rescued (the rescue
        # runs first each round, at heartbeat_staleness after a job's last heartbeat or claim,
        # which is never later than the worker's last report plus one report interval).
        staleness = timedelta(seconds=config.heartbeat_staleness + REPORT_EVERY + DEAD_MARGIN)
        async with conn.transaction():
            cursor = await conn.execute(statements["lock_capacities"], {"staleness": staleness})
            rows = await cursor.fetchall()
            if not rows:
                self.last_plan = None
                return None
            await conn.execute(statements["delete_dead_capacities"], {"staleness": staleness})
            live = [row for row in rows if row[5]]
            if not live:
                self.last_plan = None
                return None
            cursor = await conn.execute(
                statements["read_cluster_settings"], {"global_max_workers": config.global_max_workers}
            )
            setting = await cursor.fetchone()
            global_max = self._global_max(setting[0] if setting else None, [row[4] for row in live])
            cursor = await conn.execute(statements["read_queues"])
            names = [d.name for d in cursor.description or []]
            limits: dict[str, QueueConfig] = {}
            for values in await cursor.fetchall():
                queue = QueueConfig.from_row(dict(zip(names, values, strict=True)))
                limits[queue.name] = queue
            views = []
            for instance_id, use, applied, caps, _, _, read in live:
                for queue in use or {}:
                    limits.setdefault(queue, QueueConfig(queue))
                views.append(
                    WorkerView(
                        worker=str(instance_id),
                        use={
                            q: QueueUse(int(u.get("held", 0)), int(u.get("demand", 0))) for q, u in (use or {}).items()
                        },
                        applied={q: int(n) for q, n in (applied or {}).items()},
                        published={q: int(n) for q, n in (caps or {}).items()},
                        read={q: int(n) for q, n in (read or {}).items()},
                    )
                )
            plan = self.planner.plan(global_max, limits, views, now=time.monotonic())
            logger.debug(
                "cluster plan global_max=%s workers=%s caps=%s",
                global_max,
                [(v.worker[:8], dict(v.use), dict(v.applied), dict(v.read), dict(v.published)) for v in views],
                {w[:8]: c for w, c in plan.caps.items()},
            )
            ids = [view.worker for view in views]
            await conn.execute(
                statements["publish_capacities"],
                {
                    "ids": ids,
                    "caps": [json.dumps(plan.caps[i]) for i in ids],
                    "floors": [json.dumps(plan.floors[i]) for i in ids],
                    "rates": [json.dumps(plan.rates[i]) for i in ids],
                    "lease": timedelta(seconds=lease_seconds(config)),
                },
            )
        self.last_plan = plan
        return plan

    def _global_max(self, row_value: int | None, local_values: list[int | None]) -> int | None:
        """The cluster row's value; if live workers were started with another, the smallest of all,
        so workers that disagree never together pass any of them (and the log says so)."""
        values = {v for v in [row_value, *local_values] if v is not None}
        effective = min(values) if values else None
        if len(values) > 1:
            said = f"{sorted(values)}"
            if said != self._said:
                logger.warning(
                    "workers disagree on the global maximum: cluster setting %s, workers' own settings %s; "
                    "using the smallest, %s (edit it in the admin's Cluster settings, and give the workers "
                    "the same GLOBAL_MAX_WORKERS)",
                    row_value,
                    sorted({v for v in local_values if v is not None}),
                    effective,
                )
                self._said = said
        return effective
