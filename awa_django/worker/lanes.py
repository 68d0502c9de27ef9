"""Where each priority lane's claim scan starts: one cursor per (queue, priority), per dispatcher.

A claimed job leaves the old version of its row, and that version's entry in the available index,
behind until vacuum removes them; while any transaction holds an older snapshot vacuum cannot, and
a claim that scans a lane from its front visits every such entry. ``claim_jobs`` therefore starts
each lane's scan after the (run_at, id) of the last job this dispatcher claimed from it, which
the btree descent reaches without touching what lies before it.

Jobs can become available behind a cursor: a scheduled or retryable job promoted when due, a job
released at shutdown, aged into a higher lane, retried from the admin, inserted with a past run_at,
or inserted by a transaction that committed after later jobs were claimed. So the dispatcher's own
claim rescans every lane from its front now and then: at least ``RESCAN_EVERY`` seconds apart, and
at least ``RESCAN_COST_FACTOR`` times as long apart as the last rescan took. The second rule bounds
what rescans cost the claim path to about 1/RESCAN_COST_FACTOR of its time whatever the number of
dead entries (a rescan visits each one); the price is that, while an old snapshot lets them pile
up, a job made available behind a cursor waits longer (the bound is in the dispatcher's log and in
docs/storage.md). The writer's hand-over claims never rescan, so the queue keeps moving while one
does. Nothing else depends on the cursor: it only says where a scan starts, the claim's own
``FOR UPDATE SKIP LOCKED`` still decides who takes a row, so a stale or reset cursor can cost a
longer scan or a later pickup, never a job skipped for good or claimed twice.

Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

LANES = 4  # priorities 1 (highest) .. 4, the range awa_job_priority_range allows

# Rescans from the lanes' fronts: at least this many seconds apart (what a job made available
# behind a cursor waits when vacuum keeps up and a rescan is cheap) ...
RESCAN_EVERY = 1.0
# ... and at least this many times the last rescan's duration apart (rescans cost the claim path at
# most about 1/RESCAN_COST_FACTOR of its time however many dead entries they walk).
RESCAN_COST_FACTOR = 20.0


class LaneCursors:
    """The (run_at, id) after which each lane's next claim scan starts; None = the lane's front."""

    __slots__ = (
        "_cursor",
        "_generation",
        "_rescan_at",
        "_rescan_issued",
        "last_rescan_seconds",
        "rescan_interval",
        "rescans",
    )

    def __init__(self) -> None:
        self._cursor: list[tuple[datetime, int] | None] = [None] * LANES
        self._rescan_at = float("-inf")  # the first claim scans from the fronts
        self._rescan_issued: float | None = None  # when the pending rescan claim was issued
        self._generation = 0
        self.rescans = 0
        self.last_rescan_seconds = 0.0
        self.rescan_interval = RESCAN_EVERY

    def params(self, now: float, may_rescan: bool = True) -> dict[str, Any]:
        """claim_jobs' cursor parameters for a claim issued at monotonic time ``now``.

        When a rescan is due and this claim may do it, this claim scans every lane from its front;
        claims issued meanwhile keep using the cursors. The returned ``lanes_generation`` and
        ``lanes_rescan`` (ignored by the SQL) are what ``advance`` needs back with the rows.
        """
        rescan = may_rescan and self._rescan_issued is None and now >= self._rescan_at
        if rescan:
            self._rescan_issued = now
            self.rescans += 1
        cursors = [None] * LANES if rescan else self._cursor
        return {
            "after_run_at": [None if c is None else c[0] for c in cursors],
            "after_id": [None if c is None else c[1] for c in cursors],
            "lanes_generation": self._generation,
            "lanes_rescan": rescan,
        }

    def rescan_failed(self, now: float) -> None:
        """The rescan claim raised: the next claim may rescan again."""
        self._rescan_issued = None
        self._rescan_at = now

    def advance(self, rows: Sequence[Sequence[Any]], params: dict[str, Any], now: float) -> float | None:
        """Move each lane's cursor past the rows a claim issued with ``params`` returned.

        ``rows`` are claim_jobs rows (id at index 0, priority at 7, run_at at 9), in lane order.
        An ordinary claim moves each lane's cursor to the last (run_at, id) it claimed there.
        A rescan that found jobs behind a lane's cursor, and may have left more there (it filled
        its limit), moves that cursor back to the last of them, and the cursors of the lanes it
        did not reach (the lanes before filled it) back to their fronts, so the next claims take
        what is left behind in order; that is a new generation, and a claim issued before it does not move the
        cursors (its rows lie after the old cursors: moving there would step over what is left
        behind). Returns the rescan's duration when ``params`` was the rescan, None otherwise.
        """
        if params["lanes_generation"] != self._generation:
            return None
        last: list[tuple[datetime, int] | None] = [None] * LANES
        counts = [0] * LANES
        for row in rows:
            lane = int(row[7]) - 1
            claimed: tuple[datetime, int] = (row[9], int(row[0]))
            counts[lane] += 1
            previous = last[lane]
            if previous is None or claimed > previous:
                last[lane] = claimed
        took = None
        rewound = False
        if params["lanes_rescan"]:
            took = max(now - (self._rescan_issued or now), 0.0)
            self.last_rescan_seconds = took
            self.rescan_interval = max(RESCAN_EVERY, RESCAN_COST_FACTOR * took)
            self._rescan_at = now + self.rescan_interval
            self._rescan_issued = None
            remaining = int(params["limit"])
            for lane in range(LANES):
                key, current = last[lane], self._cursor[lane]
                if remaining == 0:
                    # The lanes before filled the claim: this one was not scanned, and what lies
                    # behind its cursor is found by the next claims that reach it from its front.
                    if current is not None:
                        self._cursor[lane] = None
                        rewound = True
                    continue
                exhausted = counts[lane] < remaining  # nothing more in this lane for this claim
                remaining -= counts[lane]
                if key is not None and current is not None and key < current and not exhausted:
                    self._cursor[lane] = key  # more may be behind: the next claims take them in order
                    rewound = True
            if rewound:
                self._generation += 1
        for lane in range(LANES):
            key, current = last[lane], self._cursor[lane]
            if key is not None and (current is None or key > current):
                self._cursor[lane] = key
        return took

    def cursor(self, priority: int) -> tuple[datetime, int] | None:
        return self._cursor[priority - 1]
