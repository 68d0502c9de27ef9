"""Retention: finished jobs past their keep time leave the database.

``prune`` is the leader's retention duty, one call per sweep. It is its own module so that the
leader's loop can run it beside (never in front of) promotion, rescue and schedules; how the rows
go is this module's business (docs/storage.md).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg

from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.worker.config import WorkerConfig

__all__ = ["BATCH", "prune", "retention"]

BATCH = 1000


def retention(config: WorkerConfig) -> dict[JobState, timedelta]:
    """How long finished jobs are kept, per final state."""
    return {
        JobState.COMPLETED: timedelta(seconds=config.completed_retention),
        JobState.FAILED: timedelta(seconds=config.failed_retention),
        JobState.CANCELLED: timedelta(seconds=config.failed_retention),
    }


async def prune(conn: psycopg.AsyncConnection[Any], config: WorkerConfig) -> int:
    """Delete the finished jobs past their retention; return how many went."""
    deleted = 0
    for state, older_than in retention(config).items():
        while True:
            cursor = await conn.execute(
                statements["delete_finished_jobs"],
                {"state": state.value, "older_than": older_than, "limit": BATCH},
            )
            deleted += cursor.rowcount
            if cursor.rowcount < BATCH:
                break
            await asyncio.sleep(0)
    return deleted
