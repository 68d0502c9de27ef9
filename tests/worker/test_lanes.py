"""LaneCursors: where each priority lane's claim scan starts, when the lanes are rescanned, and
when a rescan moves a cursor back. Pure: no database, the clock passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from awa_django.worker.lanes import LANES, RESCAN_COST_FACTOR, RESCAN_EVERY, LaneCursors

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def claimed(job_id: int, priority: int, seconds: int) -> tuple[Any, ...]:
    """A claim_jobs row: id, kind, queue, args, attempt, max_attempts, run_lease, priority, metadata, run_at."""
    return (job_id, "k", "q", {}, 1, 25, 1, priority, {}, T0 + timedelta(seconds=seconds))


def params(lanes: LaneCursors, now: float, limit: int = 10, may_rescan: bool = True) -> dict[str, Any]:
    return {"limit": limit, **lanes.params(now, may_rescan=may_rescan)}


def settled(now: float = 0.0) -> LaneCursors:
    """Cursors past the first (rescan) claim, which found lane 2 at (10 s, id 10)."""
    lanes = LaneCursors()
    first = params(lanes, now)
    assert first["lanes_rescan"] is True
    lanes.advance([claimed(10, 2, 10)], first, now)
    return lanes


def test_first_claim__scans_every_lane_from_its_front() -> None:
    p = params(LaneCursors(), 0.0)
    assert p["lanes_rescan"] is True
    assert p["after_run_at"] == [None] * LANES
    assert p["after_id"] == [None] * LANES


def test_advance__each_lane_moves_to_the_last_key_claimed_from_it() -> None:
    lanes = settled()
    p = params(lanes, 0.1)
    assert p["lanes_rescan"] is False
    lanes.advance([claimed(3, 1, 5), claimed(4, 1, 6), claimed(11, 2, 10), claimed(12, 2, 11)], p, 0.1)
    assert lanes.cursor(1) == (T0 + timedelta(seconds=6), 4)
    assert lanes.cursor(2) == (T0 + timedelta(seconds=11), 12)
    assert lanes.cursor(3) is None
    nxt = params(lanes, 0.2)
    assert nxt["after_run_at"][:2] == [T0 + timedelta(seconds=6), T0 + timedelta(seconds=11)]
    assert nxt["after_id"] == [4, 12, None, None]


def test_advance__never_moves_a_cursor_back_on_an_ordinary_claim() -> None:
    lanes = settled()
    p = params(lanes, 0.1)
    lanes.advance([claimed(5, 2, 3)], p, 0.1)  # a concurrent claim's row that lies behind
    assert lanes.cursor(2) == (T0 + timedelta(seconds=10), 10)


def test_rescan__waits_at_least_rescan_every_seconds() -> None:
    lanes = settled(now=0.0)
    assert params(lanes, RESCAN_EVERY * 0.9)["lanes_rescan"] is False
    assert params(lanes, RESCAN_EVERY)["lanes_rescan"] is True


def test_rescan__spaced_by_its_own_cost() -> None:
    lanes = settled(now=0.0)
    p = params(lanes, 5.0)
    assert p["lanes_rescan"] is True
    took = lanes.advance([], p, 5.0 + 2.0)  # the rescan took 2 s
    assert took == 2.0
    assert lanes.rescan_interval == RESCAN_COST_FACTOR * 2.0
    assert params(lanes, 7.0 + RESCAN_COST_FACTOR * 2.0 - 0.1)["lanes_rescan"] is False
    assert params(lanes, 7.0 + RESCAN_COST_FACTOR * 2.0)["lanes_rescan"] is True


def test_rescan__one_at_a_time_and_others_keep_the_cursors() -> None:
    lanes = settled(now=0.0)
    rescan = params(lanes, 2.0)
    other = params(lanes, 2.1)
    assert (rescan["lanes_rescan"], other["lanes_rescan"]) == (True, False)
    assert other["after_id"] == [None, 10, None, None]


def test_hand_over_claims__never_rescan() -> None:
    lanes = settled(now=0.0)
    assert params(lanes, 100.0, may_rescan=False)["lanes_rescan"] is False
    assert params(lanes, 100.0)["lanes_rescan"] is True


def test_rescan__full_batch_behind_the_cursor__moves_it_back_so_the_rest_follow_in_order() -> None:
    lanes = settled(now=0.0)
    rescan = params(lanes, 2.0, limit=2)
    lanes.advance([claimed(1, 2, 1), claimed(2, 2, 2)], rescan, 2.0)  # filled: more may be behind
    assert lanes.cursor(2) == (T0 + timedelta(seconds=2), 2)


def test_rescan__short_batch__the_lane_is_exhausted_behind_and_the_cursor_stays() -> None:
    lanes = settled(now=0.0)
    rescan = params(lanes, 2.0, limit=5)
    lanes.advance([claimed(1, 2, 1), claimed(2, 2, 2)], rescan, 2.0)
    assert lanes.cursor(2) == (T0 + timedelta(seconds=10), 10)


def test_rescan__moving_back_ignores_claims_issued_before_it() -> None:
    lanes = settled(now=0.0)
    before = params(lanes, 0.5)
    rescan = params(lanes, 2.0, limit=1)
    lanes.advance([claimed(1, 2, 1)], rescan, 2.0)
    assert lanes.cursor(2) == (T0 + timedelta(seconds=1), 1)
    lanes.advance([claimed(20, 2, 20)], before, 2.1)  # would step over what is still behind
    assert lanes.cursor(2) == (T0 + timedelta(seconds=1), 1)


def test_rescan_failed__the_next_claim_may_rescan_again() -> None:
    lanes = settled(now=0.0)
    assert params(lanes, 2.0)["lanes_rescan"] is True
    assert params(lanes, 2.1)["lanes_rescan"] is False  # one pending
    lanes.rescan_failed(2.2)
    assert params(lanes, 2.3)["lanes_rescan"] is True


def test_rescan__filled_by_an_earlier_lane__later_lanes_go_back_to_their_fronts() -> None:
    lanes = settled(now=0.0)
    p = params(lanes, 0.1)
    lanes.advance([claimed(30, 3, 30)], p, 0.1)
    rescan = params(lanes, 2.0, limit=1)
    lanes.advance([claimed(1, 1, 1)], rescan, 2.0)  # lane 1 filled it: lanes 2-4 were not scanned
    assert lanes.cursor(1) == (T0 + timedelta(seconds=1), 1)
    assert (lanes.cursor(2), lanes.cursor(3)) == (None, None)
