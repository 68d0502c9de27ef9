"""LaneCursors: where each priority lane's claim scan starts, how the look-behind's findings
rewind a lane, and when a rewinding claim moves a cursor back. Pure: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from awa_django.context import ClaimedJob
from awa_django.worker.lanes import LANES, LaneCursors

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def claimed(job_id: int, priority: int, seconds: int) -> ClaimedJob:
    """A claim_jobs row."""
    return ClaimedJob(
        id=job_id,
        kind="k",
        queue="q",
        args={},
        attempt=1,
        max_attempts=25,
        run_lease=1,
        priority=priority,
        metadata={},
        run_at=at(seconds),
    )


def params(lanes: LaneCursors, limit: int = 10) -> dict[str, Any]:
    return {"limit": limit, **lanes.params()}


def settled() -> LaneCursors:
    """Cursors past a first claim that found lane 2 at (10 s, id 10)."""
    lanes = LaneCursors()
    lanes.advance([claimed(10, 2, 10)], params(lanes))
    return lanes


def test_first_claim__scans_every_lane_from_its_front() -> None:
    p = params(LaneCursors())
    assert p["after_run_at"] == [None] * LANES
    assert p["after_id"] == [None] * LANES
    assert p["lanes_rewound"] == [False] * LANES


def test_advance__each_lane_moves_to_the_last_key_claimed_from_it() -> None:
    lanes = settled()
    lanes.advance([claimed(3, 1, 5), claimed(4, 1, 6), claimed(11, 2, 10), claimed(12, 2, 11)], params(lanes))
    assert lanes.cursor(1) == (at(6), 4)
    assert lanes.cursor(2) == (at(11), 12)
    assert lanes.cursor(3) is None
    nxt = params(lanes)
    assert nxt["after_run_at"][:2] == [at(6), at(11)]
    assert nxt["after_id"] == [4, 12, None, None]
    assert lanes.looking() == [(1, (at(6), 4)), (2, (at(11), 12))]


def test_advance__never_moves_a_cursor_back_on_an_ordinary_claim() -> None:
    lanes = settled()
    lanes.advance([claimed(5, 2, 3)], params(lanes))  # a concurrent claim's row that lies behind
    assert lanes.cursor(2) == (at(10), 10)


def test_found_behind__the_next_claim_starts_just_before_the_job_found() -> None:
    lanes = settled()
    assert lanes.found_behind(2, (at(3), 7)) is True
    p = params(lanes)
    assert p["lanes_rewound"] == [False, True, False, False]
    assert (p["after_run_at"][1], p["after_id"][1]) == (at(3), 6)  # (run_at, id) > (3 s, 6) takes id 7
    assert params(lanes)["lanes_rewound"] == [False] * LANES  # used once


def test_found_behind__ignores_a_key_at_or_after_the_cursor_and_lanes_without_one() -> None:
    lanes = settled()
    assert lanes.found_behind(2, (at(10), 10)) is False
    assert lanes.found_behind(2, (at(12), 1)) is False
    assert lanes.found_behind(3, (at(1), 1)) is False  # no cursor: the lane's claims start at its front
    assert params(lanes)["lanes_rewound"] == [False] * LANES


def test_found_behind__keeps_the_earliest_of_several_findings() -> None:
    lanes = settled()
    lanes.found_behind(2, (at(5), 5))
    lanes.found_behind(2, (at(2), 9))
    lanes.found_behind(2, (at(7), 1))
    p = params(lanes)
    assert (p["after_run_at"][1], p["after_id"][1]) == (at(2), 8)


def test_rewind__one_claim_at_a_time_and_others_keep_the_cursors() -> None:
    lanes = settled()
    lanes.found_behind(2, (at(3), 3))
    rewinding = params(lanes)
    lanes.found_behind(2, (at(1), 1))  # found while the rewinding claim is out
    other = params(lanes)
    assert (rewinding["lanes_rewound"][1], other["lanes_rewound"][1]) == (True, False)
    assert other["after_id"] == [None, 10, None, None]
    lanes.advance([claimed(3, 2, 3)], rewinding)
    assert params(lanes)["lanes_rewound"][1] is True  # now the later finding goes out


def test_rewind__filled_in_the_lane__moves_the_cursor_back_so_the_rest_follow_in_order() -> None:
    lanes = settled()
    lanes.found_behind(2, (at(1), 1))
    rewinding = params(lanes, limit=2)
    lanes.advance([claimed(1, 2, 1), claimed(2, 2, 2)], rewinding)  # filled: more may be behind
    assert lanes.cursor(2) == (at(2), 2)


def test_rewind__short_batch__the_lane_ran_out_behind_and_the_cursor_stays() -> None:
    lanes = settled()
    lanes.found_behind(2, (at(1), 1))
    rewinding = params(lanes, limit=5)
    lanes.advance([claimed(1, 2, 1), claimed(2, 2, 2)], rewinding)
    assert lanes.cursor(2) == (at(10), 10)


def test_rewind__that_scans_past_the_old_cursor__moves_it_forward() -> None:
    lanes = settled()
    lanes.found_behind(2, (at(1), 1))
    rewinding = params(lanes, limit=2)
    lanes.advance([claimed(1, 2, 1), claimed(11, 2, 11)], rewinding)
    assert lanes.cursor(2) == (at(11), 11)


def test_rewind__moving_back_ignores_claims_issued_before_it() -> None:
    lanes = settled()
    before = params(lanes)
    lanes.found_behind(2, (at(1), 1))
    rewinding = params(lanes, limit=1)
    lanes.advance([claimed(1, 2, 1)], rewinding)
    assert lanes.cursor(2) == (at(1), 1)
    lanes.advance([claimed(20, 2, 20)], before)  # would step over what is still behind
    assert lanes.cursor(2) == (at(1), 1)


def test_claim_failed__its_rewinds_are_pending_again() -> None:
    lanes = settled()
    lanes.found_behind(2, (at(4), 4))
    failed = params(lanes)
    assert params(lanes)["lanes_rewound"][1] is False  # one out
    lanes.claim_failed(failed)
    again = params(lanes)
    assert again["lanes_rewound"][1] is True
    assert (again["after_run_at"][1], again["after_id"][1]) == (at(4), 3)


def test_rewind__not_reached_because_an_earlier_lane_filled_it__starts_there_next_time() -> None:
    lanes = settled()
    lanes.advance([claimed(30, 3, 30)], params(lanes))
    lanes.found_behind(2, (at(2), 2))
    lanes.found_behind(3, (at(5), 5))
    rewinding = params(lanes, limit=1)
    lanes.advance([claimed(1, 1, 1)], rewinding)  # lane 1 filled it: lanes 2-3 were not scanned
    assert lanes.cursor(1) == (at(1), 1)
    assert lanes.cursor(2) == (at(2), 1)
    assert lanes.cursor(3) == (at(5), 4)
