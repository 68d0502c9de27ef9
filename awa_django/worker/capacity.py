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
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_django.concurrency.cluster import ClusterPlan, ClusterPlanner, QueueUse, WorkerView
from awa_django.sql import statements
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)

REPORT_EVERY = 0.2  # seconds between a member's reports
MIN_LEASE = 2.0  # seconds; at least four leader rounds
DEAD_MARGIN = 0.8  # seconds beyond the staleness (and a report interval) before a silent worker's part is freed


def lease_seconds(config: WorkerConfig) -> float:
    return max(MIN_LEASE, 4 * config.maintenance_interval)


class ClusterMember:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.caps: dict[str, int] = {}
        self.floors: dict[str, int] = {}
        self.leased = False
        self.reports = 0
        self._last_lease = -math.inf  # monotonic time of the last report that found a valid lease
        self.runtime.allocator.set_capacities({})  # nothing until the leader has planned for us

    async def run(self) -> None:
        stop = self.runtime.stop
        while not stop.stopping:
            try:
                await self.report_once()
            except TRANSIENT_ERRORS as exc:
                logger.warning("capacity report failed: %r; retrying", exc)
                self._expire_if_due()
            await stop.sleep(REPORT_EVERY)

    async def report_once(self) -> None:
        runtime = self.runtime
        use = runtime.runners.queue_use()
        params = {
            "instance_id": runtime.identity.key,
            "use": json.dumps({q: {"held": held, "demand": demand} for q, (held, demand) in use.items()}),
            "applied": json.dumps(runtime.allocator.capacities or {}),
            "global_max_workers": runtime.config.global_max_workers,
        }
        async with runtime.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["report_capacity"], params)
            row = await cursor.fetchone()
        self.reports += 1
        if row is None:  # pragma: no cover - an upsert always returns its row
            return
        caps, floors, rates, leased = row["caps"], row["floors"], row["rates"], row["leased"]
        self.floors = {q: int(n) for q, n in (floors or {}).items()}
        if leased:
            self._last_lease = time.monotonic()
            self._apply({q: int(n) for q, n in (caps or {}).items()}, leased=True)
            runtime.runners.apply_rate_shares({q: float(r) for q, r in (rates or {}).items()})
        else:
            self._expire_if_due()

    def _expire_if_due(self) -> None:
        """Past the lease (the leader or the database is gone): keep only the floor caps."""
        if time.monotonic() - self._last_lease < lease_seconds(self.runtime.config):
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
            self.runtime.allocator.set_capacities(caps)
            self.runtime.runners.wake_waiting()

    async def leave(self) -> None:
        """At shutdown, after the jobs are written or handed back: our part returns at once."""
        with contextlib.suppress(*TRANSIENT_ERRORS):
            async with self.runtime.pool.connection(timeout=2) as conn:
                await conn.execute(statements["delete_worker_capacity"], {"instance_id": self.runtime.identity.key})


class ClusterLeader:
    """The maintenance leader's part: plan and publish every cluster-scope worker's caps."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.planner = ClusterPlanner()
        self.last_plan: ClusterPlan | None = None
        self._said: str | None = None

    async def plan_once(self, conn: psycopg.AsyncConnection[Any]) -> ClusterPlan | None:
        """One planning round, in one transaction; None when no worker is in cluster scope."""
        config = self.runtime.config
        # A dead worker's part is freed only once its running jobs were surely rescued (the rescue
        # runs first each round, at heartbeat_staleness after a job's last heartbeat or claim,
        # which is never later than the worker's last report plus one report interval).
        # A worker reporting a longer staleness of its own in its snapshot keeps its part that much
        # longer: its jobs are rescued no sooner (rescue_stale_jobs).
        margin = timedelta(seconds=REPORT_EVERY + DEAD_MARGIN)
        staleness = timedelta(seconds=config.heartbeat_staleness) + margin
        async with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["lock_capacities"], {"staleness": staleness, "margin": margin})
            rows = await cursor.fetchall()
            if not rows:
                self.last_plan = None
                return None
            await cursor.execute(statements["delete_dead_capacities"], {"staleness": staleness, "margin": margin})
            live = [row for row in rows if row["live"]]
            if not live:
                self.last_plan = None
                return None
            await cursor.execute(statements["read_cluster_settings"], {"global_max_workers": config.global_max_workers})
            setting = await cursor.fetchone()
            global_max = self._global_max(
                setting["global_max_workers"] if setting else None, [row["global_max_workers"] for row in live]
            )
            await cursor.execute(statements["read_queues"])
            limits: dict[str, QueueConfig] = {}
            for values in await cursor.fetchall():
                queue = QueueConfig.from_row(values)
                limits[queue.name] = queue
            views = []
            for row in live:
                use = row["use"] or {}
                for queue in use:
                    limits.setdefault(queue, QueueConfig(queue))
                views.append(
                    WorkerView(
                        worker=str(row["instance_id"]),
                        use={q: QueueUse(int(u.get("held", 0)), int(u.get("demand", 0))) for q, u in use.items()},
                        applied={q: int(n) for q, n in (row["applied"] or {}).items()},
                        published={q: int(n) for q, n in (row["caps"] or {}).items()},
                        read={q: int(n) for q, n in (row["read"] or {}).items()},
                        read_rates={q: float(r) for q, r in (row["read_rates"] or {}).items()},
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
            await cursor.execute(
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
