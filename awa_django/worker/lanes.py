"""Where each priority lane's claim scan starts: one cursor per (queue, priority), per dispatcher.

A claimed job leaves the old version of its row, and that version's entry in the available index,
behind until vacuum removes them; while any transaction holds an older snapshot vacuum cannot, and
a claim that scans a lane from its front visits every such entry. ``claim_jobs`` therefore starts
each lane's scan after the (run_at, id) of the last job this dispatcher claimed from it, which
the btree descent reaches without touching what lies before it.

Jobs can become available behind a cursor: a scheduled or retryable job promoted when due, a job
released at shutdown, aged into a higher lane, retried from the admin, inserted with a past run_at,
or inserted by a transaction that committed after later jobs were claimed. Every lane is therefore
rescanned from its front at least every ``rescan_every`` seconds, so such a job waits at most
that long (plus the claim's own wait) before it is claimed in (priority, run_at, id) order again.
Nothing else depends on the cursor: it only says where a scan starts, the claim's own
``FOR UPDATE SKIP LOCKED`` still decides who takes a row, so a stale or reset cursor can cost a
longer scan, never a job skipped for good or claimed twice.

Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

LANES = 4  # priorities 1 (highest) .. 4, the range awa_job_priority_range allows

# How often every lane is scanned again from its front. A full scan costs one heap visit per dead
# entry in front of the lane (none when vacuum keeps up); a job made available behind the cursor
# waits up to this long. Measured in docs/storage.md.
RESCAN_EVERY = 1.0


class LaneCursors:
    """The (run_at, id) after which each lane's next claim scan starts; None = the lane's front."""

    __slots__ = ("_cursor", "_generation", "_rescan_at", "rescan_every", "rescans")

    def __init__(self, rescan_every: float = RESCAN_EVERY) -> None:
        if not rescan_every > 0:
            raise ValueError(f"rescan_every must be a positive number of seconds, not {rescan_every!r}")
        self.rescan_every = rescan_every
        self._cursor: list[tuple[datetime, int] | None] = [None] * LANES
        self._rescan_at: float | None = None  # None: rescan on the first claim
        self._generation = 0
        self.rescans = 0

    def params(self, now: float) -> dict[str, Any]:
        """claim_jobs' cursor parameters for a claim issued at monotonic time ``now``.

        When a rescan is due, every cursor goes back to its lane's front first. The returned
        ``lanes_generation`` (ignored by the SQL) is what ``advance`` needs back with the rows.
        """
        if self._rescan_at is None or now >= self._rescan_at:
            self._cursor = [None] * LANES
            self._rescan_at = now + self.rescan_every
            self._generation += 1
            self.rescans += 1
        return {
            "after_run_at": [None if c is None else c[0] for c in self._cursor],
            "after_id": [None if c is None else c[1] for c in self._cursor],
            "lanes_generation": self._generation,
        }

    def advance(self, rows: Iterable[Sequence[Any]], generation: int) -> None:
        """Move each lane's cursor to the last (run_at, id) claimed from it.

        ``rows`` are claim_jobs rows (priority at index 7, run_at at 9, id at 0). A claim issued
        before the latest rescan does not move the cursors: the rows it returned lie after the old
        cursors, and moving there would step over what the rescan has not reached yet.
        """
        if generation != self._generation:
            return
        for row in rows:
            lane = int(row[7]) - 1
            key = (row[9], int(row[0]))
            current = self._cursor[lane]
            if current is None or key > current:
                self._cursor[lane] = key

    def cursor(self, priority: int) -> tuple[datetime, int] | None:
        return self._cursor[priority - 1]
