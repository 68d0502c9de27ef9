"""The maintenance leader: one worker at a time, elected in Postgres (see ``election``).

The leader's round fires due periodic-job slots (``scheduler``), promotes due scheduled/retryable
jobs, rescues running jobs whose heartbeat went stale or whose deadline passed, plans cluster
capacity and ages the priority of long-waiting jobs. Between rounds it sleeps the maintenance
interval, or less when a schedule is due sooner.

Its two slow duties run beside the round, each on a task and a connection of its own (``duty``),
so that neither ever delays a promotion, a rescue or a schedule: retention (finished jobs past
their keep time leave, ``retention``; stale worker snapshots go) every ``RETENTION_EVERY`` seconds,
and the rollup of finished jobs into the console's per-minute history (``history``). They run only
while this worker leads: started when it gains the leadership, cancelled when it loses it.

Leadership is a session-level advisory lock held on the main connection (if the leader dies or
loses its connection, Postgres drops the lock and another worker takes over on its next round),
or, behind a transaction pooler, a lease row renewed at the start of each round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from awa_django import defaults
from awa_django.conf import awa_settings
from awa_django.observability.joblog import log_job
from awa_django.sql import statements
from awa_django.worker.capacity import ClusterLeader
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff, connect
from awa_django.worker.duty import Duty
from awa_django.worker.election import LEADER_LOCK, Election, election_for
from awa_django.worker.history import OpenTransactionLog, roll_up_history
from awa_django.worker.retention import prune, retention
from awa_django.worker.runtime import Runtime
from awa_django.worker.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["LEADER_LOCK", "Maintenance", "retention"]

BATCH = 1000
CLUSTER_PLAN_EVERY = 0.2  # seconds between the leader's rounds while workers are in cluster scope
RETENTION_EVERY = 60.0  # seconds between retention sweeps
MIN_SLEEP = 0.005  # seconds: the shortest wait between rounds when a schedule is due at once
# The rescue scans the running jobs' heartbeat and deadline indexes from their oldest entries, and
# under an old snapshot those hold every finished job's dead entry too: it runs at most once a
# round and at least this many times its own last duration apart (docs/storage.md).
RESCUE_COST_FACTOR = 20.0


class Maintenance:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.is_leader = False
        self._rescue_at = -math.inf  # the first round rescues
        self.rounds = 0
        # Started when this worker gains the leadership, stopped when it loses it (module docstring).
        # The retention's creates and drops and the history's rounds take turns: a round reads the
        # branches of awa_job_done for seconds at a high job rate, and a DDL trying for a branch's
        # lock meanwhile would only be refused (retention._exclusive) until the next sweep.
        self.storage_turn = asyncio.Lock()
        self.retention = Duty("retention", runtime, self._sweep, leading=self._leading, period=RETENTION_EVERY)
        self.history = Duty("history", runtime, self._roll_up, leading=self._leading, period=defaults.HISTORY_EVERY)
        self.open_transactions = OpenTransactionLog()  # a stuck session is logged once, not every round
        self.cluster = ClusterLeader(runtime)
        self.scheduler = Scheduler(runtime.registry)
        self._next_fire: float | None = None  # time.monotonic() at which a schedule is next due
        self.election: Election = election_for(
            runtime.identity.instance_id,
            runtime.config.heartbeat_staleness,
            transaction_pooler=awa_settings().transaction_pooler,
        )

    def _leading(self) -> bool:
        return self.is_leader and not self.runtime.stop.stopping

    async def _stop_duties(self) -> None:
        await asyncio.gather(self.retention.stop(), self.history.stop())

    async def close(self) -> None:
        """Stop the side duties, resign (so another worker leads at once) and close the connection."""
        was_leader, self.is_leader = self.is_leader, False
        await self._stop_duties()  # before resigning: no duty runs once another worker may lead
        if self.conn is not None:
            if was_leader and not self.conn.closed:
                try:
                    await self.election.resign(self.conn)
                except psycopg.Error as exc:  # the lease then expires on its own
                    logger.warning("maintenance leader could not resign: %r", exc)
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None
        self.election.connection_lost()
        self.is_leader = False

    async def run(self) -> None:
        runtime = self.runtime
        backoff = Backoff()
        while not runtime.stop.stopping:
            try:
                if self.conn is None or self.conn.closed:
                    self.is_leader = False
                    await self._stop_duties()
                    self.election.connection_lost()
                    self.conn = await connect(runtime.config.database_alias, purpose="maintenance")
                was_leader = self.is_leader
                self.is_leader = await self.election.campaign(self.conn)
                if self.is_leader and not was_leader:
                    logger.info("this worker is now the maintenance leader instance=%s", runtime.identity.instance_id)
                elif was_leader and not self.is_leader:
                    logger.warning("this worker is no longer the maintenance leader")
                    await self._stop_duties()
                if self.is_leader:
                    self.retention.start()  # no-ops while they run
                    self.history.start()
                    try:
                        await self.run_once(self.conn)
                    except psycopg.DatabaseError as exc:
                        if isinstance(exc, TRANSIENT_ERRORS):
                            raise
                        # A statement the database refused (a constraint, a timeout): say so and
                        # try again next round; the worker's jobs keep running meanwhile.
                        logger.error("maintenance round failed: %r", exc, exc_info=exc)
                backoff.reset()
                await runtime.stop.sleep(self._round_delay())
            except TRANSIENT_ERRORS as exc:
                if self.is_leader:
                    logger.warning("maintenance leader lost its connection: %r", exc)
                await self.close()
                await runtime.stop.sleep(backoff.next())

    def _round_delay(self) -> float:
        """The maintenance interval, shortened to when the next schedule slot is due (so a
        per-second schedule fires on time) but never below MIN_SLEEP."""
        interval = self.runtime.config.maintenance_interval
        if self.is_leader and self.cluster.last_plan is not None:
            # Workers in capacity scope "cluster" wait for the leader's caps (a new worker has
            # none): plan them more often than the rest of the leader's work needs.
            interval = min(interval, CLUSTER_PLAN_EVERY)
        if not self.is_leader or self._next_fire is None:
            return interval
        return max(MIN_SLEEP, min(interval, self._next_fire - time.monotonic()))

    async def _rescue(self, conn: psycopg.AsyncConnection[Any]) -> list[DictRow]:
        """One batch of rescue_stale_jobs, unless the last one was expensive and recent."""
        started = time.monotonic()
        if started < self._rescue_at:
            return []
        staleness = timedelta(seconds=self.runtime.config.heartbeat_staleness)
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["rescue_stale_jobs"], {"staleness": staleness, "limit": BATCH})
            rescued = await cursor.fetchall()
        took = time.monotonic() - started
        self._rescue_at = started + RESCUE_COST_FACTOR * took
        return rescued

    async def run_once(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        """One round of the leader's duties that keep a cadence (retention and the history rollup run
        beside it, ``Duty``); returns counts of what it did."""
        runtime = self.runtime
        done = {"fired": 0, "promoted": 0, "rescued": 0, "aged": 0}
        # Schedules first: their jobs are due now, and a round's other duties can take a while.
        self._next_fire = None
        done["fired"] = await self.scheduler.fire_due(conn)
        due_in = await self.scheduler.seconds_until_due(conn)
        if due_in is not None:
            self._next_fire = time.monotonic() + due_in
        while True:
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(statements["promote_due_jobs"], {"limit": BATCH})
                promoted = sum(row["n"] for row in await cursor.fetchall())
            done["promoted"] += promoted
            if promoted < BATCH:
                break
        rescued = await self._rescue(conn)
        if rescued:
            done["rescued"] = len(rescued)
            logger.warning(
                "rescued %d running job(s) with a stale heartbeat or a passed deadline: ids=%s",
                len(rescued),
                [row["id"] for row in rescued][:20],
            )
            for row in rescued:
                runtime.metrics.job_finished(row["queue"], row["kind"], "rescued", None)
                log_job(
                    "rescued",
                    job_id=row["id"],
                    kind=row["kind"],
                    queue=row["queue"],
                    attempt=row["attempt"],
                    error=row["reason"],
                    note=f"now {row['state']}",
                )
            await conn.execute(statements["promote_due_jobs"], {"limit": BATCH})
        # Cluster capacity: after the rescue, so a dead worker's jobs and its part go together.
        await self.cluster.plan_once(conn)
        for queue in runtime.config.queues.values():
            if queue.priority_aging:
                cursor = await conn.execute(
                    statements["age_priorities"],
                    {"queue": queue.name, "aging": timedelta(seconds=queue.priority_aging), "limit": BATCH},
                )
                done["aged"] += len(await cursor.fetchall())
        self.rounds += 1
        return done

    async def _sweep(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """The retention duty's step: finished jobs past their retention, then stale snapshots."""
        config = self.runtime.config
        deleted = await prune(conn, config, turn=self.storage_turn)
        if deleted:
            logger.debug("retention deleted %d finished job(s)", deleted)
        if self._leading():
            await conn.execute(
                statements["delete_stale_worker_instances"],
                {"older_than": timedelta(seconds=max(config.heartbeat_staleness, 30.0))},
            )
        return RETENTION_EVERY

    async def _roll_up(self, conn: psycopg.AsyncConnection[Any]) -> float:
        """The history duty's step: one rollup round. Rounds are spaced by their own cost too (a
        round recomputes the open minutes whole, so under load it re-reads their finished jobs a
        few times): at most a twentieth of a connection's time. A round that stopped short of the
        current minute (a new leader catching up) is followed at once."""
        async with self.storage_turn:
            started = time.monotonic()
            bounds = await roll_up_history(conn)
        self.open_transactions.note(bounds)
        if bounds.catching_up:
            return 0.0
        return max(defaults.HISTORY_EVERY, defaults.HISTORY_COST_FACTOR * (time.monotonic() - started))
