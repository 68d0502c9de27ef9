"""OverflowPool: tables of the allocation rule's cases, then a model-based property test."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from awa_django.concurrency import OverflowPool
from awa_django.exceptions import InvalidWeightError


def test_try_acquire__sole_contender_gets_whole_pool() -> None:
    pool = OverflowPool(20, {"a": 1, "b": 3})
    assert pool.try_acquire("a", 50) == 20
    assert pool.available == 0


def test_try_acquire__grant_is_limited_by_wanted() -> None:
    pool = OverflowPool(20, {"a": 1})
    assert pool.try_acquire("a", 3) == 3
    assert (pool.held("a"), pool.demand("a"), pool.available) == (3, 3, 17)


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        pytest.param(20, {"a": 3, "b": 1}, {"a": 15, "b": 5}, id="three_to_one"),
        pytest.param(10, {"a": 1, "b": 1}, {"a": 5, "b": 5}, id="equal_weights_split_evenly"),
        # ceil(10/3) = 4 each, but only 10 exist: the last comer gets what is left.
        pytest.param(10, {"a": 1, "b": 1, "c": 1}, {"a": 4, "b": 4, "c": 2}, id="ceil_share_last_gets_rest"),
        pytest.param(7, {"a": 5, "b": 2}, {"a": 5, "b": 2}, id="uneven_total"),
    ],
)
def test_try_acquire__contending_queues_split_by_weight(
    total: int, weights: dict[str, int], expected: dict[str, int]
) -> None:
    pool = OverflowPool(total, weights)
    for queue in weights:  # everyone declares demand first, nobody holds anything yet
        pool.try_acquire(queue, 1)
        pool.release(queue, pool.held(queue))
    granted = {queue: pool.try_acquire(queue, 100) for queue in weights}
    assert granted == expected


def test_try_acquire__queue_over_its_share_gets_nothing_more() -> None:
    pool = OverflowPool(20, {"a": 3, "b": 1})
    assert pool.try_acquire("a", 100) == 20  # alone: takes everything
    assert pool.try_acquire("b", 100) == 0  # nothing available yet
    pool.release("a", 6)  # a holds 14, its share is now 15
    assert pool.try_acquire("b", 100) == 5  # b's share is ceil(20 * 1/4) = 5
    assert pool.try_acquire("a", 100) == 1
    assert pool.try_acquire("a", 100) == 0


def test_try_acquire_zero__empty_queue_stops_contending() -> None:
    pool = OverflowPool(12, {"a": 1, "b": 1})
    pool.try_acquire("b", 4)
    pool.release("b", 4)
    assert pool.contenders == {"b"}  # demand recorded, holds nothing
    assert pool.fair_share("a") == 6
    assert pool.try_acquire("b", 0) == 0
    assert pool.contenders == frozenset()
    assert pool.try_acquire("a", 100) == 12


def test_try_acquire_zero__queue_still_holding_keeps_contending() -> None:
    pool = OverflowPool(12, {"a": 1, "b": 1})
    pool.try_acquire("b", 2)
    pool.try_acquire("b", 0)
    assert pool.demand("b") == 0
    assert pool.contenders == {"b"}
    assert pool.try_acquire("a", 100) == 6


@pytest.mark.parametrize(
    ("total", "weights", "queue", "share"),
    [
        # float: 100 * (7 / 100) == 7.000000000000001, whose ceil is 8
        pytest.param(100, {"a": 7, "b": 93}, "a", 7, id="no_float_rounding_up"),
        # float: (2**60 + 1) / 2 rounds to 2**59, whose ceil is one short
        pytest.param(2**60 + 1, {"a": 1, "b": 1}, "a", 2**59 + 1, id="no_float_precision_loss"),
    ],
)
def test_fair_share__uses_exact_integer_ceil(total: int, weights: dict[str, int], queue: str, share: int) -> None:
    pool = OverflowPool(total, weights)
    for q in weights:
        pool.try_acquire(q, 1)
    assert pool.fair_share(queue) == share


def test_reconfigure__shrink_keeps_held_and_grants_nothing_until_under_total() -> None:
    pool = OverflowPool(10, {"a": 1})
    pool.try_acquire("a", 10)
    pool.reconfigure(4, {"a": 1})
    assert (pool.held("a"), pool.total, pool.available) == (10, 4, 0)
    pool.release("a", 6)
    assert pool.try_acquire("a", 5) == 0  # 4 held, total 4
    pool.release("a", 1)
    assert pool.try_acquire("a", 5) == 1


def test_reconfigure__removed_queue_keeps_held_until_released() -> None:
    pool = OverflowPool(10, {"a": 1, "b": 1})
    pool.try_acquire("a", 4)
    pool.reconfigure(10, {"b": 1})
    assert pool.held("a") == 4
    assert pool.try_acquire("b", 100) == 6  # a's permits still use up the pool
    with pytest.raises(KeyError, match="'a' is not in this overflow pool"):
        pool.try_acquire("a", 1)
    pool.release("a", 4)
    with pytest.raises(KeyError):
        pool.held("a")


def test_reconfigure__new_weights_apply_to_next_grant() -> None:
    pool = OverflowPool(20, {"a": 1, "b": 1})
    pool.try_acquire("b", 1)
    pool.release("b", 1)
    pool.reconfigure(20, {"a": 3, "b": 1})
    assert pool.try_acquire("a", 100) == 15


def test_reconfigure__invalid_weight_raises_and_keeps_old_config() -> None:
    pool = OverflowPool(10, {"a": 2})
    pool.try_acquire("a", 3)
    with pytest.raises(InvalidWeightError):
        pool.reconfigure(5, {"a": 0})
    assert (pool.total, pool.weights, pool.held("a"), pool.demand("a")) == (10, {"a": 2}, 3, 3)


@pytest.mark.parametrize("weight", [0, -1, 1.5, True], ids=["zero", "negative", "float", "bool"])
def test_init__invalid_weight_raises(weight: object) -> None:
    with pytest.raises(InvalidWeightError, match="weight must be an integer of at least 1"):
        OverflowPool(10, {"a": weight})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda p: p.try_acquire("zz", 1), id="try_acquire"),
        pytest.param(lambda p: p.release("zz", 1), id="release"),
        pytest.param(lambda p: p.held("zz"), id="held"),
        pytest.param(lambda p: p.demand("zz"), id="demand"),
        pytest.param(lambda p: p.fair_share("zz"), id="fair_share"),
    ],
)
def test_unknown_queue__raises_key_error_naming_it(call: Callable[[OverflowPool], object]) -> None:
    pool = OverflowPool(10, {"a": 1})
    with pytest.raises(KeyError, match=r"'zz' is not in this overflow pool \(its queues: 'a'\)"):
        call(pool)


def test_release__more_than_held_raises_and_changes_nothing() -> None:
    pool = OverflowPool(10, {"a": 1})
    pool.try_acquire("a", 2)
    with pytest.raises(ValueError, match="cannot release 3 overflow permits: it holds 2"):
        pool.release("a", 3)
    assert (pool.held("a"), pool.held_total) == (2, 2)


# --- property test: the pool against a plain model of the rule ----------------------

QUEUES = ("a", "b", "c", "d")
weights_strategy = st.dictionaries(st.sampled_from(QUEUES), st.integers(1, 5), max_size=len(QUEUES))


class OverflowPoolMachine(RuleBasedStateMachine):
    """Random acquire / release / clear-demand / reconfigure sequences, checked against a model."""

    @initialize(total=st.integers(0, 30), weights=weights_strategy)
    def start(self, total: int, weights: dict[str, int]) -> None:
        self.pool = OverflowPool(total, weights)
        self.total = total
        self.weights = dict(weights)
        self.held = dict.fromkeys(weights, 0)  # also removed queues that still hold
        self.demand = dict.fromkeys(weights, 0)
        self.ceiling = total  # sum held may exceed total only up to what a shrink left held

    def contending_weight(self) -> int:
        return sum(w for q, w in self.weights.items() if self.demand[q] > 0 or self.held.get(q, 0) > 0)

    @rule(queue=st.sampled_from(QUEUES), wanted=st.integers(0, 40))
    def acquire(self, queue: str, wanted: int) -> None:
        if queue not in self.weights:
            with pytest.raises(KeyError):
                self.pool.try_acquire(queue, wanted)
            return
        held_total_before = sum(self.held.values())
        others_contend = any(self.demand[q] > 0 or self.held.get(q, 0) > 0 for q in self.weights if q != queue)
        granted = self.pool.try_acquire(queue, wanted)
        self.demand[queue] = wanted
        share = math.ceil(Fraction(self.total * self.weights[queue], self.contending_weight())) if wanted else 0
        expected = max(0, min(wanted, self.total - held_total_before, share - self.held[queue]))
        assert granted == expected
        assert 0 <= granted <= wanted
        assert self.held[queue] + granted <= max(share, self.held[queue])  # never past the fair share
        if held_total_before >= self.total:
            assert granted == 0  # over-committed after a shrink: nothing new
        if not others_contend:  # sole contender: limited only by what it wants and what is free
            assert granted == max(0, min(wanted, self.total - held_total_before))
        self.held[queue] += granted

    @rule(queue=st.sampled_from(QUEUES), data=st.data())
    def release(self, queue: str, data: st.DataObject) -> None:
        if self.held.get(queue, 0) == 0:
            return
        n = data.draw(st.integers(1, self.held[queue]))
        self.pool.release(queue, n)
        self.held[queue] -= n
        if self.held[queue] == 0 and queue not in self.weights:
            del self.held[queue]
        self.ceiling = max(self.total, min(self.ceiling, sum(self.held.values())))

    @rule(queue=st.sampled_from(QUEUES))
    def clear_demand(self, queue: str) -> None:
        if queue not in self.weights:
            return
        assert self.pool.try_acquire(queue, 0) == 0
        self.demand[queue] = 0
        if self.held[queue] == 0:
            assert queue not in self.pool.contenders

    @rule(total=st.integers(0, 30), weights=weights_strategy)
    def reconfigure(self, total: int, weights: dict[str, int]) -> None:
        self.pool.reconfigure(total, weights)
        self.demand = {q: self.demand.get(q, 0) for q in weights}
        self.held = {q: n for q, n in self.held.items() if n > 0 or q in weights}
        for q in weights:
            self.held.setdefault(q, 0)
        self.total, self.weights = total, dict(weights)
        self.ceiling = max(total, sum(self.held.values()))

    @invariant()
    def pool_matches_model(self) -> None:
        assert self.pool.held_total == sum(self.held.values())
        for queue, n in self.held.items():
            assert self.pool.held(queue) == n
        for queue, d in self.demand.items():
            assert self.pool.demand(queue) == d
        expected_contenders = {q for q in self.weights if self.demand[q] > 0 or self.held[q] > 0}
        assert self.pool.contenders == expected_contenders

    @invariant()
    def sum_held_never_exceeds_total_except_after_a_shrink(self) -> None:
        assert self.pool.held_total <= self.ceiling


TestOverflowPoolProperties = OverflowPoolMachine.TestCase
TestOverflowPoolProperties.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
