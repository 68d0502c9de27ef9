"""The look-behind: finds jobs that became available behind the dispatchers' lane cursors.

Claims scan each priority lane from a cursor (worker/lanes.py) so they never walk the dead index
entries that claimed jobs leave behind while an old snapshot holds vacuum back. A job made
available behind a cursor (promoted, retried, released, aged, inserted with a past run_at or by a
transaction that committed late) is found here: one ``find_jobs_behind`` query for every lane of
every queue this worker claims from, and each lane with such a job is rewound so that the next
claim of its queue goes back for it (and the dispatcher is nudged, in case it sleeps).

The query walks from each lane's front, so it is the part whose cost grows with the dead entries;
it runs on its own task, never on the claim path, at most every ``LOOK_BEHIND_EVERY`` seconds and
at least ``LOOK_BEHIND_COST_FACTOR`` times its own last duration apart. When vacuum keeps up a
job made available behind a cursor waits about 0.1 s more than one ahead of it; under an old
snapshot the wait grows with the look's duration, which is logged when slow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from awa_django.sql import statements
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.lanes import LOOK_BEHIND_COST_FACTOR, LOOK_BEHIND_EVERY, LaneCursors

logger = logging.getLogger(__name__)

# A look taking this long (seconds) is logged: it walked dead entries vacuum could not remove.
SLOW_LOOK = 0.5


class Lanes(Protocol):
    """What the look-behind needs of a dispatcher."""

    lanes: LaneCursors

    def found_behind(self, priority: int, key: tuple[datetime, int]) -> None: ...


class LookBehindHost(Protocol):
    pool: AsyncConnectionPool
    stopping: bool

    @property
    def dispatchers(self) -> Mapping[str, Lanes]: ...

    async def sleep(self, seconds: float) -> None: ...


class LookBehind:
    def __init__(self, host: LookBehindHost) -> None:
        self.host = host
        self.looks = 0
        self.found = 0
        self.last_seconds = 0.0
        self.interval = LOOK_BEHIND_EVERY

    def params(self) -> dict[str, list[Any]]:
        params: dict[str, list[Any]] = {"queues": [], "lanes": [], "before_run_at": [], "before_id": []}
        for name, dispatcher in self.host.dispatchers.items():
            for priority, (run_at, job_id) in dispatcher.lanes.looking():
                params["queues"].append(name)
                params["lanes"].append(priority)
                params["before_run_at"].append(run_at)
                params["before_id"].append(job_id)
        return params

    async def look_once(self) -> int:
        """One look over every lane with a cursor; returns how many lanes were rewound."""
        params = self.params()
        if not params["queues"]:
            return 0
        started = time.monotonic()
        async with self.host.pool.connection() as conn:
            cursor = await conn.execute(statements["find_jobs_behind"], params)
            rows = await cursor.fetchall()
        took = time.monotonic() - started
        self.looks += 1
        self.last_seconds = took
        self.interval = max(LOOK_BEHIND_EVERY, LOOK_BEHIND_COST_FACTOR * took)
        if took >= SLOW_LOOK:
            logger.warning(
                "slow look-behind lanes=%d seconds=%.3f next_in=%.1f hint=%s",
                len(params["queues"]),
                took,
                self.interval,
                "a long transaction or an old snapshot is likely holding vacuum back (pg_stat_activity)",
            )
        dispatchers = self.host.dispatchers
        for queue, priority, run_at, job_id in rows:
            dispatcher = dispatchers.get(queue)
            if dispatcher is not None:
                logger.debug("job behind the cursor queue=%s priority=%s job_id=%s", queue, priority, job_id)
                dispatcher.found_behind(int(priority), (run_at, int(job_id)))
        self.found += len(rows)
        return len(rows)

    async def run(self) -> None:
        while not self.host.stopping:
            try:
                await self.look_once()
            except TRANSIENT_ERRORS as exc:
                logger.warning("look-behind failed: %r; retrying", exc)
                self.interval = max(self.interval, 1.0)
            await self.host.sleep(self.interval)
