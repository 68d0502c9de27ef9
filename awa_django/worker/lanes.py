"""Where each priority lane's claim scan starts: one cursor per (queue, priority), per queue runner.

A claimed job leaves the old version of its row, and that version's entry in the available index,
behind until vacuum removes them; while any transaction holds an older snapshot vacuum cannot, and
a claim that scans a lane from its front visits every such entry. ``claim_jobs`` therefore starts
each lane's scan after the (run_at, id) of the last job its queue runner claimed from it, which
the btree descent reaches without touching what lies before it.

Jobs can become available behind a cursor: a scheduled or retryable job promoted when due, a job
released at shutdown, aged into a higher lane, retried from the admin, inserted with a past run_at,
or inserted by a transaction that committed after later jobs were claimed. The worker's
look-behind (worker/lookbehind.py) finds them off the claim path: one query for every lane of
every queue, returning each lane's first due, available job behind its cursor; a frequent window
look covers the few seconds before each cursor and a rarer full look the whole lane, each at least
``LOOK_BEHIND_COST_FACTOR`` times as long apart as its last run took. ``found_behind`` turns
that into a *rewind*: the next claim of the queue (the runner's own or a hand-over) starts
that lane just before the job found, so it takes what lies behind in (run_at, id) order,
walking only the dead entries between the job found and the cursor, never those before it.
Nothing else depends on the cursor: it only says where a scan starts, the claim's own
``FOR UPDATE SKIP LOCKED`` still decides who takes a row, so a stale or rewound cursor can cost a
longer scan or a later pickup, never a job skipped for good or claimed twice.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

LANES = 4  # priorities 1 (highest) .. 4, the range awa_job_priority_range allows

# The look-behind's two kinds of look (worker/lookbehind.py). The window look only checks the last
# LOOK_BEHIND_WINDOW seconds of run_at before each cursor, where nearly every job made available
# behind one lands (an insert whose transaction committed late, a retry or a scheduled job just
# promoted): its cost is the jobs claimed in that window, not the dead entries of the whole run,
# so it runs often. The full look scans each lane from its front (an aged job, an explicit past
# run_at, a job released long after it was due) and walks every dead entry an old snapshot keeps.
LOOK_BEHIND_WINDOW = 2.0
WINDOW_LOOK_EVERY = 0.05  # seconds, at most this often ...
FULL_LOOK_EVERY = 1.0
# ... and each kind at least this many times its own last duration apart, so together they cost
# the database at most about 2/LOOK_BEHIND_COST_FACTOR of a connection's time.
LOOK_BEHIND_COST_FACTOR = 20.0

Key = tuple[datetime, int]


class Claimed(Protocol):
    """What a cursor needs of a claimed row (``context.ClaimedJob`` has it)."""

    @property
    def id(self) -> int: ...

    @property
    def priority(self) -> int: ...

    @property
    def run_at(self) -> datetime | None: ...


class LaneCursors:
    """Per lane, the (run_at, id) after which the next claim scan starts (None = the lane's front),
    and the rewinds the look-behind found and no claim has used yet."""

    __slots__ = ("_cursor", "_generation", "_pending", "_rewind_out", "rewinds")

    def __init__(self) -> None:
        self._cursor: list[Key | None] = [None] * LANES
        self._pending: list[Key | None] = [None] * LANES  # where a rewound lane's scan starts
        self._rewind_out = False  # a claim carrying rewinds is out: the next ones do not rewind
        self._generation = 0  # moves on whenever a cursor moves back
        self.rewinds = 0

    def params(self) -> dict[str, Any]:
        """claim_jobs' cursor parameters for the next claim.

        When the look-behind found jobs behind some cursors and no rewinding claim is out, this
        claim starts those lanes just before them. The SQL binds ``after_run_at_1`` ..
        ``after_id_4``; the lists ``after_run_at``/``after_id``, ``lanes_generation`` and
        ``lanes_rewound`` (the SQL ignores them) are what ``advance`` or ``claim_failed`` need back.
        """
        rewound: list[bool] = [False] * LANES
        starts = list(self._cursor)
        if not self._rewind_out and any(p is not None for p in self._pending):
            for lane, start in enumerate(self._pending):
                if start is not None:
                    starts[lane], rewound[lane] = start, True
            self._pending = [None] * LANES
            self._rewind_out = True
            self.rewinds += 1
        params: dict[str, Any] = {
            "after_run_at": [None if c is None else c[0] for c in starts],
            "after_id": [None if c is None else c[1] for c in starts],
            "lanes_generation": self._generation,
            "lanes_rewound": rewound,
        }
        # What claim_jobs.sql binds: one scalar per lane (after_run_at_1 ...), cheaper than arrays.
        for lane, start in enumerate(starts, 1):
            params[f"after_run_at_{lane}"] = None if start is None else start[0]
            params[f"after_id_{lane}"] = None if start is None else start[1]
        return params

    @property
    def live(self) -> Sequence[Key | None]:
        """Each lane's cursor, lane 1 first (None: no claim has moved it), not copied: read only."""
        return self._cursor

    def looking(self) -> list[tuple[int, Key]]:
        """(priority, cursor) of every lane with a cursor: what the look-behind asks about."""
        return [(lane + 1, key) for lane, key in enumerate(self._cursor) if key is not None]

    def found_behind(self, priority: int, key: Key) -> bool:
        """The look-behind saw ``key`` as the first due, available job behind this lane's cursor:
        the next claim starts the lane just before it. False when the cursor has moved back past
        it meanwhile (the claims reach it anyway)."""
        lane = priority - 1
        cursor = self._cursor[lane]
        if cursor is None or key >= cursor:
            return False
        start = (key[0], key[1] - 1)  # claim_jobs takes (run_at, id) > start: the job found and on
        pending = self._pending[lane]
        self._pending[lane] = start if pending is None else min(pending, start)
        return True

    def claim_failed(self, params: dict[str, Any]) -> None:
        """The claim issued with ``params`` did not run (or raised): its rewinds are pending again."""
        if not any(params["lanes_rewound"]):
            return
        self._rewind_out = False
        for lane, rewound in enumerate(params["lanes_rewound"]):
            if rewound:
                start = (params["after_run_at"][lane], params["after_id"][lane])
                pending = self._pending[lane]
                self._pending[lane] = start if pending is None else min(pending, start)

    def advance(self, rows: Sequence[Claimed], params: dict[str, Any]) -> None:
        """Move each lane's cursor past the rows a claim issued with ``params`` returned.

        ``rows`` are claim_jobs rows, in lane order.
        An ordinary claim moves each lane's cursor forward to the last (run_at, id) it claimed
        there. A rewinding claim moves a rewound lane's cursor back: to the last job it claimed
        there when it filled its limit in that lane (more may lie behind the old cursor), or to
        the lane's start when the lanes before filled the claim (it never reached the lane). A
        move back starts a new generation: a claim issued before it does not move the cursors
        (its rows lie after the old cursors; moving there would step over what is left behind).
        """
        rewound: list[bool] = params["lanes_rewound"]
        if any(rewound):
            self._rewind_out = False
        if params["lanes_generation"] != self._generation:
            return
        last: list[Key | None] = [None] * LANES
        counts = [0] * LANES
        for row in rows:
            assert row.run_at is not None, "claim_jobs returns run_at"
            lane = row.priority - 1
            claimed: Key = (row.run_at, row.id)
            counts[lane] += 1
            previous = last[lane]
            if previous is None or claimed > previous:
                last[lane] = claimed
        moved_back = False
        remaining = int(params["limit"])
        for lane in range(LANES):
            if rewound[lane]:
                current = self._cursor[lane]
                back: Key | None = None
                if remaining == 0:  # the lanes before filled the claim: start here next time
                    back = (params["after_run_at"][lane], params["after_id"][lane])
                elif counts[lane] == remaining:  # filled in this lane: more may lie behind
                    back = last[lane]
                # else the lane ran out of due jobs from its start on: nothing is left behind
                if back is not None and (current is None or back < current):
                    self._cursor[lane] = back
                    moved_back = True
            remaining = max(remaining - counts[lane], 0)
        if moved_back:
            self._generation += 1
        for lane in range(LANES):
            key, current = last[lane], self._cursor[lane]
            if key is not None and (current is None or key > current):
                self._cursor[lane] = key

    def move_to(self, priority: int, key: Key) -> None:
        """Start the lane's next scan after ``key``, if that is past its cursor: a keyed runner's
        discovery cursors skip to the lanes' ends, what lies before them being found key by key
        (worker/keyed.py)."""
        lane = priority - 1
        current = self._cursor[lane]
        if current is None or key > current:
            self._cursor[lane] = key

    def cursor(self, priority: int) -> Key | None:
        return self._cursor[priority - 1]

    def cursors(self) -> list[Key | None]:
        """Every lane's cursor, lane 1 first (None: the lane's front)."""
        return list(self._cursor)
