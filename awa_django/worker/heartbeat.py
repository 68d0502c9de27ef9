"""Heartbeats: every heartbeat interval, one statement proves every running attempt alive.

``heartbeat_jobs`` matches each row by (id, state running, run_lease) and writes the attempt's
progress with it. An attempt whose row did not match is no longer this worker's (rescued after a
stall, or cancelled): its handler is told to stop. Attempts already finishing are left out: their
final state is on its way, and the writer matches the same guard.
"""

from __future__ import annotations

import logging
from typing import Any

from awa_django.sql import statements
from awa_django.worker.completer import WRITE_ERRORS
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def run(self) -> None:
        """Batched heartbeats (with progress) for every in-flight attempt."""
        runtime = self.runtime
        stop = runtime.stop
        # Through the drain too, until the supervisor cancels it as it closes: a job still running
        # while the worker stops must go on proving itself alive, or a drain longer than
        # HEARTBEAT_STALENESS let the leader rescue it and another worker run it beside this one.
        while not stop.forced:
            await stop.sleep_unless_forced(runtime.config.heartbeat_interval)
            # Attempts already finishing are being written; in id order, like the completer's
            # batches, so two batch updates of the same rows cannot deadlock. Once the worker stops,
            # an attempt told to stop is being handed back (or is no longer this worker's).
            stopping = stop.stopping
            entries = sorted(
                (
                    entry
                    for entry in runtime.attempts.in_flight.values()
                    if not entry.context.finishing and not (stopping and entry.context.cancelled)
                ),
                key=lambda e: e.job.id,
            )
            if not entries:
                continue
            ids = [entry.job.id for entry in entries]
            leases = [entry.job.run_lease for entry in entries]
            progress = [entry.context.progress_json for entry in entries]

            async def beat(
                ids: list[int] = ids, leases: list[int] = leases, progress: list[Any] = progress
            ) -> set[int]:
                async with runtime.pool.connection() as conn:
                    cursor = await conn.execute(
                        statements["heartbeat_jobs"], {"ids": ids, "leases": leases, "progress": progress}
                    )
                    return {row[0] for row in await cursor.fetchall()}

            try:
                alive = await beat()
            except TRANSIENT_ERRORS as exc:
                logger.warning("heartbeat failed for %d job(s): %r; retrying next interval", len(ids), exc)
                continue
            except WRITE_ERRORS as exc:
                # Progress is checked when it is set, so this should not happen; if it does, the
                # attempts must still prove they are alive: beat again without the progress.
                logger.error("heartbeat refused for %d job(s) error=%r; beating again without progress", len(ids), exc)
                try:
                    alive = await beat(progress=[None] * len(ids))
                except WRITE_ERRORS as again:
                    logger.error("heartbeat failed for %d job(s): %r; retrying next interval", len(ids), again)
                    continue
            for entry in entries:
                if entry.job.id not in alive and not entry.context.finishing:
                    logger.warning(
                        "job no longer held by this worker job_id=%s run_lease=%s (rescued or cancelled); "
                        "telling its handler to stop",
                        entry.job.id,
                        entry.job.run_lease,
                    )
                    entry.context.cancel()
