"""Allocator: both modes through the one API the dispatcher uses."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest

from awa_django.concurrency import Allocator, HardReserved, Permit, QueueLimits, Weighted
from awa_django.exceptions import ConfigurationError, InvalidWeightError, MinWorkersExceedGlobalError


def weighted(global_max: int, **queues: tuple[int, int]) -> Allocator:
    """`weighted(24, a=(min_workers, weight), ...)`."""
    return Allocator.weighted(global_max, {q: QueueLimits(min_workers=m, weight=w) for q, (m, w) in queues.items()})


def kinds(permits: list[Permit]) -> list[str]:
    return [p.kind for p in permits]


# --- hard-reserved mode -------------------------------------------------------------


def test_hard_reserved__each_queue_gets_up_to_its_max_workers() -> None:
    alloc = Allocator.hard_reserved({"emails": 3, "reports": 1})
    assert alloc.mode == "hard_reserved"
    assert alloc.global_max_workers is None
    assert kinds(alloc.try_acquire("emails", 5)) == ["hard"] * 3
    assert alloc.try_acquire("emails", 5) == []
    assert len(alloc.try_acquire("reports", 5)) == 1  # queues do not share


def test_hard_reserved__released_permit_is_reusable() -> None:
    alloc = Allocator.hard_reserved({"emails": 2})
    first, _ = alloc.try_acquire("emails", 2)
    assert first.release()
    assert (alloc.in_flight("emails"), alloc.available("emails")) == (1, 1)
    assert len(alloc.try_acquire("emails", 2)) == 1


def test_hard_reserved__clear_demand_is_a_no_op_but_checks_the_queue() -> None:
    alloc = Allocator.hard_reserved({"emails": 2})
    alloc.try_acquire("emails", 1)
    alloc.clear_demand("emails")
    assert alloc.in_flight("emails") == 1
    with pytest.raises(KeyError, match="'nope' is not configured in this worker"):
        alloc.clear_demand("nope")


def test_hard_reserved__ignores_min_workers_and_weight() -> None:
    alloc = Allocator(None, {"a": QueueLimits(max_workers=2, min_workers=0, weight=9)})
    assert alloc.capacity("a") == HardReserved(max_workers=2)
    assert len(alloc.try_acquire("a", 10)) == 2


# --- weighted mode ------------------------------------------------------------------


def test_weighted__local_permits_first_then_overflow() -> None:
    alloc = weighted(10, a=(2, 1), b=(3, 1))
    permits = alloc.try_acquire("a", 4)
    assert kinds(permits) == ["local", "local", "overflow", "overflow"]


def test_weighted__sole_contender_gets_its_minimum_and_whole_pool() -> None:
    alloc = weighted(10, a=(2, 1), b=(3, 1))
    assert len(alloc.try_acquire("a", 100)) == 2 + 5
    assert alloc.capacity("a") == Weighted(min_workers=2, weight=1, overflow_held=5)
    assert len(alloc.try_acquire("b", 100)) == 3  # its guaranteed minimum is still there


def test_weighted__ignores_max_workers() -> None:
    alloc = Allocator(10, {"a": QueueLimits(max_workers=1, min_workers=0, weight=1)})
    assert len(alloc.try_acquire("a", 10)) == 10


def test_weighted__a_3_to_b_1_splits_24_as_17_to_7() -> None:
    alloc = weighted(24, a=(2, 3), b=(2, 1))
    # a asks first and takes its 2 and the whole pool of 20; its overflow jobs then finish
    # while it still has backlog, so it keeps contending and holds only its local slots.
    held = {"a": alloc.try_acquire("a", 100), "b": []}
    for permit in [p for p in held["a"] if p.kind == "overflow"]:
        permit.release()
    held["a"] = [p for p in held["a"] if not p.released]
    for _ in range(3):
        for queue in ("b", "a"):
            held[queue] += alloc.try_acquire(queue, 100)
    assert (len(held["a"]), len(held["b"])) == (17, 7)
    assert alloc.snapshot()["a"]["overflow_held"] == 15


def test_clear_demand__empty_queue_stops_contending() -> None:
    alloc = weighted(12, a=(0, 1), b=(0, 1))
    for permit in alloc.try_acquire("b", 100):  # b wants more than it got: it still contends
        permit.release()
    assert alloc.demand("b") > 0
    assert alloc.available("a") == 6
    alloc.clear_demand("b")
    assert alloc.available("a") == 12
    assert len(alloc.try_acquire("a", 100)) == 12


def test_try_acquire_zero__clears_demand_in_weighted_mode() -> None:
    alloc = weighted(12, a=(0, 1), b=(0, 1))
    alloc.try_acquire("b", 1)[0].release()
    assert alloc.try_acquire("b", 0) == []
    assert len(alloc.try_acquire("a", 100)) == 12


def test_try_acquire__wanted_within_local_slots_does_not_contend_for_the_pool() -> None:
    alloc = weighted(12, a=(2, 1), b=(0, 1))
    alloc.try_acquire("a", 2)
    assert len(alloc.try_acquire("b", 100)) == 10


@pytest.mark.parametrize("wanted", [-1, True], ids=["negative", "bool"])
def test_try_acquire__invalid_wanted_raises(wanted: int) -> None:
    alloc = Allocator.hard_reserved({"a": 1})
    with pytest.raises(ValueError, match="wanted must be an integer of at least 0"):
        alloc.try_acquire("a", wanted)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda a: a.try_acquire("zz", 1), id="try_acquire"),
        pytest.param(lambda a: a.clear_demand("zz"), id="clear_demand"),
        pytest.param(lambda a: a.capacity("zz"), id="capacity"),
        pytest.param(lambda a: a.in_flight("zz"), id="in_flight"),
        pytest.param(lambda a: a.available("zz"), id="available"),
    ],
)
def test_unknown_queue__raises_key_error_naming_it_and_the_known_ones(call: Callable[[Allocator], object]) -> None:
    alloc = Allocator.hard_reserved({"a": 1})
    with pytest.raises(KeyError, match=r"'zz' is not configured in this worker \(its queues: 'a'\)"):
        call(alloc)


# --- release and the hook -----------------------------------------------------------


def test_on_release__called_once_per_permit_with_the_queue() -> None:
    alloc = weighted(4, a=(1, 1))
    calls: list[str] = []
    alloc.on_release = calls.append
    permits = alloc.try_acquire("a", 3)
    for permit in permits + permits:
        permit.release()
    assert calls == ["a", "a", "a"]
    assert alloc.in_flight("a") == 0


def test_permit_release__returns_overflow_to_the_pool_and_local_to_the_queue() -> None:
    alloc = weighted(3, a=(1, 1), b=(0, 1))
    local, overflow, _ = alloc.try_acquire("a", 3)
    overflow.release()
    assert kinds(alloc.try_acquire("b", 5)) == ["overflow"]
    local.release()
    assert alloc.try_acquire("b", 5) == []  # a's local slot is not b's
    assert kinds(alloc.try_acquire("a", 5)) == ["local"]


# --- reporting ----------------------------------------------------------------------


def test_capacity__is_a_frozen_dataclass() -> None:
    alloc = Allocator.hard_reserved({"a": 3})
    capacity = alloc.capacity("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        capacity.max_workers = 5  # type: ignore[misc,union-attr]


def test_snapshot__hard_reserved_reports_each_queue() -> None:
    alloc = Allocator.hard_reserved({"a": 3, "b": 2})
    alloc.try_acquire("a", 1)
    assert alloc.snapshot() == {
        "a": {"mode": "hard_reserved", "max_workers": 3, "in_flight": 1, "available": 2},
        "b": {"mode": "hard_reserved", "max_workers": 2, "in_flight": 0, "available": 2},
    }


def test_snapshot__weighted_reports_overflow_held_and_is_json_ready() -> None:
    alloc = weighted(10, a=(2, 3), b=(1, 1))
    alloc.try_acquire("a", 100)  # a wants all it can get: it holds the whole pool of 7
    snapshot = alloc.snapshot()
    # b would be granted its local slot only: the pool is full (a keeps what it holds), even
    # though b's share of it, were it to contend, is 7 * 1/4.
    assert snapshot == {
        "a": {"mode": "weighted", "min_workers": 2, "weight": 3, "overflow_held": 7, "in_flight": 9, "available": 0},
        "b": {"mode": "weighted", "min_workers": 1, "weight": 1, "overflow_held": 0, "in_flight": 0, "available": 1},
    }
    assert json.loads(json.dumps(snapshot)) == snapshot


# --- configuration ------------------------------------------------------------------


def test_init__sum_of_min_workers_over_global_raises() -> None:
    with pytest.raises(
        MinWorkersExceedGlobalError, match=r"sum of min_workers \(25\) exceeds global_max_workers \(20\)"
    ):
        weighted(20, a=(20, 1), b=(5, 1))


def test_reconfigure__invalid_input_raises_and_keeps_old_config() -> None:
    alloc = weighted(10, a=(2, 1), b=(1, 1))
    alloc.try_acquire("a", 3)
    before = alloc.snapshot()
    with pytest.raises(InvalidWeightError):
        alloc.reconfigure(12, {"a": QueueLimits(min_workers=4, weight=0), "b": QueueLimits()})
    with pytest.raises(MinWorkersExceedGlobalError):
        alloc.reconfigure(3, {"a": QueueLimits(min_workers=4), "b": QueueLimits()})
    assert alloc.snapshot() == before
    assert alloc.global_max_workers == 10


@pytest.mark.parametrize(
    ("start", "new_global"), [(None, 10), (10, None)], ids=["hard_to_weighted", "weighted_to_hard"]
)
def test_reconfigure__switching_mode_raises_and_keeps_old_config(start: int | None, new_global: int | None) -> None:
    alloc = Allocator(start, {"a": QueueLimits(max_workers=2)})
    before = alloc.snapshot()
    with pytest.raises(ConfigurationError, match="restart the worker"):
        alloc.reconfigure(new_global, {"a": QueueLimits(max_workers=2)})
    assert alloc.snapshot() == before


def test_reconfigure__shrunk_max_workers_keeps_held_and_grants_nothing_until_under() -> None:
    alloc = Allocator.hard_reserved({"a": 4})
    permits = alloc.try_acquire("a", 4)
    alloc.reconfigure(None, {"a": QueueLimits(max_workers=2)})
    assert (alloc.in_flight("a"), alloc.available("a")) == (4, 0)
    permits[0].release()
    permits[1].release()
    assert alloc.try_acquire("a", 1) == []
    permits[2].release()
    assert len(alloc.try_acquire("a", 5)) == 1


def test_reconfigure__grown_weight_applies_to_next_grant() -> None:
    alloc = weighted(20, a=(0, 1), b=(0, 1))
    alloc.try_acquire("b", 100)[0].release()  # b contends with demand, holds 19
    alloc.reconfigure(20, {"a": QueueLimits(weight=3), "b": QueueLimits(weight=1)})
    assert len(alloc.try_acquire("a", 100)) == 1  # only one is free; a's target is 15
    assert alloc.waiting() == []  # none free now
    b = alloc.try_acquire("b", 0)  # b keeps what it holds (nothing is taken back)
    assert b == [] and alloc.in_flight("b") == 19


def test_reconfigure__lowered_min_workers_never_lets_total_pass_global() -> None:
    alloc = weighted(10, a=(10, 1), b=(0, 1))
    permits = alloc.try_acquire("a", 10)
    alloc.reconfigure(10, {"a": QueueLimits(min_workers=0), "b": QueueLimits(min_workers=0)})
    assert alloc.try_acquire("b", 5) == []  # the pool is now 10, but 10 are in flight
    assert alloc.available("b") == 0
    permits[0].release()
    assert len(alloc.try_acquire("b", 5)) == 1
    assert alloc.total_in_flight == 10


def test_reconfigure__raised_min_workers_waits_for_overflow_to_drain() -> None:
    alloc = weighted(10, a=(0, 1), b=(0, 1))
    b_permits = alloc.try_acquire("b", 10)
    alloc.reconfigure(10, {"a": QueueLimits(min_workers=4), "b": QueueLimits(min_workers=0)})
    assert alloc.try_acquire("a", 4) == []
    b_permits[0].release()
    assert kinds(alloc.try_acquire("a", 4)) == ["local"]


def test_reconfigure__removed_queue_keeps_permits_until_released_then_is_forgotten() -> None:
    alloc = weighted(6, a=(1, 1), b=(0, 1))
    a_permits = alloc.try_acquire("a", 3)
    alloc.reconfigure(6, {"b": QueueLimits()})
    assert alloc.queues == ("b",)
    assert alloc.in_flight("a") == 3
    assert alloc.available("a") == 0
    with pytest.raises(KeyError):
        alloc.try_acquire("a", 1)
    assert len(alloc.try_acquire("b", 10)) == 3  # a's permits still count
    assert list(alloc.snapshot()) == ["b"]
    for permit in a_permits:
        assert permit.release()
    with pytest.raises(KeyError):
        alloc.in_flight("a")


def test_reconfigure__re_added_queue_still_counts_its_outstanding_permits() -> None:
    alloc = Allocator.hard_reserved({"a": 2, "b": 1})
    permits = alloc.try_acquire("a", 2)
    alloc.reconfigure(None, {"b": QueueLimits(max_workers=1)})
    alloc.reconfigure(None, {"a": QueueLimits(max_workers=2), "b": QueueLimits(max_workers=1)})
    assert alloc.try_acquire("a", 2) == []
    permits[0].release()
    assert alloc.in_flight("a") == 1
    assert len(alloc.try_acquire("a", 2)) == 1


def test_reconfigure__takes_a_copy_of_the_limits() -> None:
    @dataclasses.dataclass
    class QueueRow:  # a mutable, model-like row
        max_workers: int = 3
        min_workers: int = 0
        weight: int = 1
        rate_limit: float | None = None
        rate_burst: int = 0

    row = QueueRow()
    alloc = Allocator(None, {"a": row})
    row.max_workers = 0  # edited after validation, never re-validated
    assert alloc.capacity("a") == HardReserved(max_workers=3)


def test_keepable__hard_slots_are_kept_until_a_shrink_puts_the_queue_over_capacity() -> None:
    allocator = Allocator.hard_reserved({"a": 2})
    permits = allocator.try_acquire("a", 2)
    assert allocator.keepable("a", permits) == permits

    allocator.reconfigure(None, {"a": QueueLimits(max_workers=1)})

    assert allocator.keepable("a", permits) == permits[:1]  # what try_acquire would grant after release
    permits[0].release()  # back under capacity: the one still out may pass on
    assert allocator.keepable("a", permits) == permits[1:]


def test_keepable__overflow_above_fair_share_goes_back_when_another_queue_contends() -> None:
    allocator = Allocator.weighted(
        24, {"a": QueueLimits(min_workers=2, weight=3), "b": QueueLimits(min_workers=2, weight=1)}
    )
    a = allocator.try_acquire("a", 24)  # sole contender: 2 local + the whole pool of 20
    assert len(a) == 22
    assert allocator.keepable("a", a) == a

    assert allocator.try_acquire("b", 24)  # b contends: its 2 local slots, no overflow left
    local = [p for p in a if p.kind == "local"]
    overflow = [p for p in a if p.kind == "overflow"]
    # a's fair share of the pool is now ceil(20 * 3 / 4) = 15 and it holds 20: if six overflow
    # permits come back at once, only one may be handed over (20 - 6 + 1 = 15)...
    assert allocator.keepable("a", overflow[:6]) == overflow[:1]
    # ...while its guaranteed local slots are always kept.
    assert allocator.keepable("a", local) == local


def test_keepable__never_hands_over_released_or_foreign_permits() -> None:
    allocator = Allocator.hard_reserved({"a": 2, "b": 2})
    a = allocator.try_acquire("a", 2)
    b = allocator.try_acquire("b", 1)
    a[0].release()
    assert allocator.keepable("a", [*a, *b]) == a[1:]


def test_weighted__asked_while_permits_are_lent__woken_when_they_come_back() -> None:
    """The writer lends the slots of jobs being written (``lending``); until those permits are
    released, the global maximum still counts them. A queue that asks in between is refused, and
    must be woken when they come back: its demand is recorded where ``waiting()`` reads it."""
    alloc = Allocator.weighted(10, {"a": QueueLimits(min_workers=0)}, clock=lambda: 0.0)
    permits = alloc.try_acquire("a", 10)
    assert len(permits) == 10
    with alloc.lending(permits):
        pass  # no other queue took them: the writer passes nothing across
    assert alloc.try_acquire("a", 1) == []  # still ten in flight: refused
    assert alloc.demand("a") == 1
    assert alloc.waiting() == []  # nothing is free yet
    for permit in permits:
        permit.release()
    assert alloc.to_wake() == ["a"]
    assert len(alloc.try_acquire("a", 1)) == 1
