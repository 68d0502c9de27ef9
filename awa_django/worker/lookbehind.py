"""The look-behind: finds jobs that became available behind the queue runners' lane cursors.

Claims scan each priority lane from a cursor (worker/lanes.py) so they never walk the dead index
entries that claimed jobs leave behind while an old snapshot holds vacuum back. A job made
available behind a cursor (promoted, retried, released, aged, inserted with a past run_at or by a
transaction that committed late) is found here: one ``find_jobs_behind`` query for every lane of
every queue this worker claims from, and each lane with such a job is rewound so that the next
claim of its queue goes back for it (``QueueRunner.found_behind``, which nudges the runner too).

Two kinds of look, on one task, never on the claim path. The window look checks only the last
``LOOK_BEHIND_WINDOW`` seconds of run_at before each cursor, where an insert that committed late
or a job just promoted lands; it walks the dead entries of those seconds only, so it runs every
``WINDOW_LOOK_EVERY`` seconds (or 20 times its duration, if longer) and such a job waits about
0.05 s more than one ahead of the cursor, with or without an old snapshot. The full look scans
each lane from its front, for the rest (a job aged into a higher lane, an explicit past run_at):
it is the part whose cost grows with the dead entries an old snapshot keeps, so it runs at most
every ``FULL_LOOK_EVERY`` seconds and at least ``LOOK_BEHIND_COST_FACTOR`` times its own last
duration apart, and is logged when slow.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from psycopg.rows import dict_row

from awa_django.sql import statements
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.lanes import (
    FULL_LOOK_EVERY,
    LOOK_BEHIND_COST_FACTOR,
    LOOK_BEHIND_WINDOW,
    WINDOW_LOOK_EVERY,
)
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)

# A look taking this long (seconds) is logged: it walked dead entries vacuum could not remove.
SLOW_LOOK = 0.5


class LookBehind:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.looks = {"window": 0, "full": 0}
        self.found = 0
        self.last_seconds = {"window": 0.0, "full": 0.0}
        self._next = {"window": 0.0, "full": 0.0}  # time.monotonic() each kind is due

    def params(self, window: float | None) -> dict[str, Any]:
        params: dict[str, Any] = {"queues": [], "lanes": [], "before_run_at": [], "before_id": []}
        for name, priority, (run_at, job_id) in self.runtime.runners.looking():
            params["queues"].append(name)
            params["lanes"].append(priority)
            params["before_run_at"].append(run_at)
            params["before_id"].append(job_id)
        params["window"] = None if window is None else timedelta(seconds=window)
        return params

    async def look_once(self, kind: str = "full") -> int:
        """One look of that kind ("window" or "full") over every lane with a cursor; returns how
        many lanes were rewound."""
        params = self.params(LOOK_BEHIND_WINDOW if kind == "window" else None)
        started = time.monotonic()
        if not params["queues"]:
            self._next[kind] = started + (WINDOW_LOOK_EVERY if kind == "window" else FULL_LOOK_EVERY)
            return 0
        async with self.runtime.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["find_jobs_behind"], params)
            rows = await cursor.fetchall()
        took = time.monotonic() - started
        self.looks[kind] += 1
        self.last_seconds[kind] = took
        every = WINDOW_LOOK_EVERY if kind == "window" else FULL_LOOK_EVERY
        interval = max(every, LOOK_BEHIND_COST_FACTOR * took)
        self._next[kind] = started + interval
        if took >= SLOW_LOOK:
            logger.warning(
                "slow look-behind kind=%s lanes=%d seconds=%.3f next_in=%.1f hint=%s",
                kind,
                len(params["queues"]),
                took,
                interval,
                "a long transaction or an old snapshot is likely holding vacuum back (pg_stat_activity)",
            )
        runners = self.runtime.runners
        for row in rows:
            logger.debug("job behind the cursor queue=%s priority=%s job_id=%s", row["queue"], row["lane"], row["id"])
            runner = runners.get(row["queue"])
            if runner is not None:
                runner.found_behind(int(row["lane"]), (row["run_at"], int(row["id"])))
        self.found += len(rows)
        return len(rows)

    async def run(self) -> None:
        stop = self.runtime.stop
        while not stop.stopping:
            kind = "full" if self._next["full"] <= self._next["window"] else "window"
            wait = self._next[kind] - time.monotonic()
            if wait > 0:
                await stop.sleep(wait)
                continue
            try:
                await self.look_once(kind)
            except TRANSIENT_ERRORS as exc:
                logger.warning("look-behind failed: %r; retrying", exc)
                self._next[kind] = time.monotonic() + 1.0
