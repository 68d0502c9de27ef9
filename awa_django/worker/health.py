"""The snapshot loop: every few seconds, this worker's health into its ``WorkerInstance`` row.

Per queue, its capacity (HardReserved / Weighted), in-flight and available permits, whether it is
paused and how many rows wait in the database; beside them the worker's flags (listening, leader,
stopping, …). The shape is ``awa_django.snapshot``'s, the one the admin and ``awa_health``
read. A failed write is logged and tried again next interval; the row of a worker that stopped
writing goes stale and its readers stop counting it live.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_django import defaults
from awa_django.snapshot import QueueSnapshot, WorkerFlags, queues_to_json
from awa_django.sql import statements
from awa_django.worker.completer import WRITE_ERRORS
from awa_django.worker.config import WorkerConfig
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)

# The count of available jobs is taken at most this many times its own last duration apart: it
# walks the available index, and under an old snapshot every dead entry in it (docs/storage.md).
COUNT_COST_FACTOR = 20.0


def snapshot_interval(config: WorkerConfig) -> float:
    """Seconds between snapshot writes (``services.snapshot_interval`` mirrors this for readers)."""
    return min(config.heartbeat_interval, defaults.SNAPSHOT_INTERVAL_MAX)


class SnapshotWriter:
    def __init__(self, runtime: Runtime, flags: Callable[[], WorkerFlags]) -> None:
        self.runtime = runtime
        self.flags = flags  # the worker's state now, beside its queues
        self._available_rows: dict[str, int] = {}
        self._count_at = -math.inf  # the first write counts

    async def run(self) -> None:
        runtime = self.runtime
        interval = snapshot_interval(runtime.config)
        while not runtime.stop.stopping:
            try:
                await self.write()
            except WRITE_ERRORS as exc:
                logger.warning("snapshot write failed: %r", exc)
            await runtime.stop.sleep(interval)

    def queues(self, available_rows: Mapping[str, int] | None = None) -> dict[str, QueueSnapshot]:
        """Per configured queue: mode, capacity, in-flight and available permits, paused, and the
        available rows counted in the database (None when not counted)."""
        allocator, runners = self.runtime.allocator, self.runtime.runners
        return {
            name: QueueSnapshot(
                mode=self.runtime.config.mode,
                capacity=allocator.capacity(name),
                in_flight=allocator.in_flight(name),
                available=allocator.available(name),
                paused=name in runners and runners[name].config.paused,
                jobs_available=(available_rows or {}).get(name),
            )
            for name in allocator.queues
        }

    async def _count_available(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
        """Available jobs per queue, counted again once COUNT_COST_FACTOR times the last count's
        duration has passed (meanwhile the snapshot shows the last count)."""
        started = time.monotonic()
        if started >= self._count_at:
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(statements["count_available_jobs"], {"queues": list(self.runtime.runners)})
                self._available_rows = {row["queue"]: row["count"] for row in await cursor.fetchall()}
            self._count_at = started + COUNT_COST_FACTOR * (time.monotonic() - started)
        return self._available_rows

    async def write(self) -> None:
        runtime = self.runtime
        identity = runtime.identity
        async with runtime.pool.connection() as conn:
            available_rows = await self._count_available(conn)
            await conn.execute(
                statements["upsert_worker_instance"],
                {
                    "instance_id": identity.instance_id,
                    "hostname": identity.hostname,
                    "pid": identity.pid,
                    "started_at": identity.started_at,
                    "mode": runtime.config.mode,
                    "global_max_workers": runtime.config.global_max_workers,
                    "queues": json.dumps(queues_to_json(self.queues(available_rows))),
                    "flags": json.dumps(self.flags().to_json()),
                },
            )
