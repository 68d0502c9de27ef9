"""OverflowPool: tables of the allocation rule's cases, then a model-based property test."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from awa_django.concurrency import OverflowPool
from awa_django.concurrency.waterfill import water_fill
from awa_django.exceptions import InvalidWeightError


def test_try_acquire__sole_contender_gets_whole_pool() -> None:
    pool = OverflowPool(20, {"a": 1, "b": 3})
    assert pool.try_acquire("a", 50) == 20
    assert pool.available == 0


def test_try_acquire__grant_is_limited_by_wanted() -> None:
    pool = OverflowPool(20, {"a": 1})
    assert pool.try_acquire("a", 3) == 3
    # demand is what it asked for and did not get; its cap (held + demand) is 3
    assert (pool.held("a"), pool.demand("a"), pool.available) == (3, 0, 17)
    assert pool.contenders == {"a"}


def _all_contend(pool: OverflowPool, weights: dict[str, int]) -> None:
    """Every queue says it could use far more than the pool, holding nothing yet."""
    for queue in weights:
        pool.try_acquire(queue, 0)
    for queue in weights:
        granted = pool.try_acquire(queue, 1000)
        pool.release(queue, granted)  # it still has demand: its cap stays, nothing is held


@pytest.mark.parametrize(
    ("total", "weights", "shares", "floors", "remainder"),
    [
        pytest.param(20, {"a": 3, "b": 1}, {"a": 15, "b": 5}, {"a": 15, "b": 5}, 0, id="three_to_one"),
        pytest.param(10, {"a": 1, "b": 1}, {"a": 5, "b": 5}, {"a": 5, "b": 5}, 0, id="equal_weights"),
        pytest.param(10, {"a": 1, "b": 1, "c": 1}, {q: 10 / 3 for q in "abc"}, {q: 3 for q in "abc"}, 1, id="thirds"),
        pytest.param(10, {"a": 10, "b": 1}, {"a": 100 / 11, "b": 10 / 11}, {"a": 9, "b": 0}, 1, id="ten_to_one"),
        pytest.param(4, {q: 1 for q in "abcde"}, {q: 0.8 for q in "abcde"}, {q: 0 for q in "abcde"}, 4, id="g4_of_5"),
    ],
)
def test_shares__water_fill_by_weight_with_integer_floors_and_a_remainder(
    total: int, weights: dict[str, int], shares: dict[str, float], floors: dict[str, int], remainder: int
) -> None:
    pool = OverflowPool(total, weights)
    _all_contend(pool, weights)
    assert {q: pool.share(q) for q in weights} == pytest.approx(shares)
    targets = {q: pool.target(q) for q in weights}
    assert {q: targets[q] - floors[q] for q in weights} == {q: int(targets[q] > floors[q]) for q in weights}
    assert sum(targets.values()) == total  # the floors plus the remainder, one each
    assert sum(targets.values()) - sum(floors.values()) == remainder


def test_shares__a_capped_queue_leaves_the_rest_to_the_others() -> None:
    pool = OverflowPool(10, {"a": 1, "b": 1, "c": 2})
    pool.try_acquire("a", 1)  # a can use one slot only (say: one rate token)
    for queue in ("b", "c"):
        pool.release(queue, pool.try_acquire(queue, 100))
    assert (pool.share("a"), pool.share("b"), pool.share("c")) == pytest.approx((1, 3, 6))


def test_try_acquire__newcomer_below_its_share_gets_the_next_free_permit_not_the_incumbent() -> None:
    pool = OverflowPool(10, {"a": 10, "b": 1}, now=0.0)
    assert pool.try_acquire("a", 100, now=0.0) == 10  # alone: the whole pool
    assert pool.try_acquire("b", 100, now=1.0) == 0  # nothing free; b's demand is recorded
    assert pool.waiting(now=1.0) == []  # nothing free to wake anyone for
    assert pool.keepable("a", 1, now=1.1) == 0  # a's finished job may not pass its permit on
    pool.release("a", 1, now=1.1)
    assert pool.waiting(now=1.1) == ["b"]
    assert pool.try_acquire("a", 100, now=1.1) == 0
    assert pool.try_acquire("b", 100, now=1.1) == 1


def test_credit__remainder_rotates_so_each_average_approaches_its_share() -> None:
    """g=1, two equal queues of 1 s jobs: whoever ran last has paid for it, so the other goes next."""
    pool = OverflowPool(1, {"a": 1, "b": 1}, now=0.0)
    pool.try_acquire("a", 5, now=0.0)
    pool.try_acquire("b", 5, now=0.0)
    order = []
    for second in range(1, 9):
        holder = "a" if pool.held("a") else "b"
        pool.release(holder, 1, now=float(second))
        (winner,) = pool.waiting(now=float(second))
        assert pool.try_acquire(winner, 5, now=float(second)) == 1
        order.append(winner)
    assert order == ["b", "a"] * 4


@settings(max_examples=100, deadline=None)
@given(
    queues=st.integers(2, 6),
    start=st.floats(0, 1e6, allow_nan=False),
    step=st.sampled_from([0.05, 0.07, 0.1, 0.15, 0.3]),
    rounds=st.integers(3, 30),
)
@example(queues=2, start=0.0, step=0.05, rounds=3)  # clock values where turns can slip to a, b, a, b, b
def test_credit__equal_queues_on_one_slot_take_turns_whatever_the_clock_values(
    queues: int, start: float, step: float, rounds: int
) -> None:
    """g=1, equal queues of equal jobs: after each full turn their credits are equal in exact
    arithmetic, and the tie goes to the one granted longest ago, so they take strict turns. With
    clock values like 0.05 s the float sums differ in their last bits; those must not decide."""
    names = [f"q{i}" for i in range(queues)]
    pool = OverflowPool(1, dict.fromkeys(names, 1), now=start)
    for queue in names:
        pool.try_acquire(queue, 5, now=start)
    order = [next(queue for queue in names if pool.held(queue))]
    for k in range(1, rounds * queues):
        now = start + k * step
        pool.release(order[-1], 1, now=now)
        (winner,) = pool.waiting(now=now)
        assert pool.try_acquire(winner, 5, now=now) == 1
        order.append(winner)
    assert order == order[:queues] * rounds


def test_try_acquire_zero__empty_queue_stops_contending_and_forgets_its_credit() -> None:
    pool = OverflowPool(12, {"a": 1, "b": 1})
    pool.release("b", pool.try_acquire("b", 100))
    assert pool.contenders == {"b"}  # demand recorded, holds nothing
    assert pool.fair_share("a") == 6
    assert pool.try_acquire("b", 0) == 0
    assert pool.contenders == frozenset()
    assert pool.credit("b") == 0.0
    assert pool.try_acquire("a", 100) == 12


def test_try_acquire_zero__queue_still_holding_keeps_contending_with_what_it_holds() -> None:
    pool = OverflowPool(12, {"a": 1, "b": 1})
    pool.try_acquire("b", 2)
    pool.try_acquire("b", 0)
    assert pool.demand("b") == 0
    assert pool.contenders == {"b"}
    assert pool.try_acquire("a", 100) == 10  # b's cap is the 2 it holds: the rest is a's


def test_fair_share__integer_arithmetic_for_the_floor() -> None:
    pool = OverflowPool(2**60 + 1, {"a": 1, "b": 1})
    for queue in ("a", "b"):
        pool.try_acquire(queue, 2**61)
        pool.release(queue, pool.held(queue))
    assert sorted([pool.target("a"), pool.target("b")]) == [2**59, 2**59 + 1]


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
    pool.release("b", pool.try_acquire("b", 100))
    pool.reconfigure(20, {"a": 3, "b": 1})
    assert pool.try_acquire("a", 100) == 15


def test_reconfigure__invalid_weight_raises_and_keeps_old_config() -> None:
    pool = OverflowPool(10, {"a": 2})
    pool.try_acquire("a", 3)
    with pytest.raises(InvalidWeightError):
        pool.reconfigure(5, {"a": 0})
    assert (pool.total, pool.weights, pool.held("a"), pool.demand("a")) == (10, {"a": 2}, 3, 0)


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
    """Random acquire / release / clear-demand / reconfigure sequences on a moving clock,
    checked against a plain model of the rule."""

    @initialize(total=st.integers(0, 30), weights=weights_strategy)
    def start(self, total: int, weights: dict[str, int]) -> None:
        self.now = 0.0
        self.pool = OverflowPool(total, weights, now=self.now)
        self.total = total
        self.weights = dict(weights)
        self.held = dict.fromkeys(weights, 0)  # also removed queues that still hold
        self.demand = dict.fromkeys(weights, 0)
        self.ceiling = total  # sum held may exceed total only up to what a shrink left held

    def contenders(self) -> set[str]:
        return {q for q, n in self.held.items() if n > 0} | {q for q in self.weights if self.demand[q] > 0}

    @rule(seconds=st.floats(0, 3))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule(queue=st.sampled_from(QUEUES), wanted=st.integers(0, 40))
    def acquire(self, queue: str, wanted: int) -> None:
        if queue not in self.weights:
            with pytest.raises(KeyError):
                self.pool.try_acquire(queue, wanted, now=self.now)
            return
        held_total_before = sum(self.held.values())
        others_contend = bool(self.contenders() - {queue})
        predicted = self.pool.grantable(queue, now=self.now)
        share_before = self.pool.fair_share(queue, now=self.now)
        granted = self.pool.try_acquire(queue, wanted, now=self.now)
        assert 0 <= granted <= wanted
        if wanted:
            assert granted == min(wanted, predicted)  # `grantable` predicts the grant
            assert self.held[queue] + granted <= max(share_before, self.held[queue])  # never past its target
        if held_total_before >= self.total:
            assert granted == 0  # over-committed after a shrink: nothing new
        if not others_contend:  # sole contender: limited only by what it wants and what is free
            assert granted == max(0, min(wanted, self.total - held_total_before))
        self.held[queue] += granted
        self.demand[queue] = wanted - granted

    @rule(queue=st.sampled_from(QUEUES), data=st.data())
    def release(self, queue: str, data: st.DataObject) -> None:
        if self.held.get(queue, 0) == 0:
            return
        n = data.draw(st.integers(1, self.held[queue]))
        self.pool.release(queue, n, now=self.now)
        self.held[queue] -= n
        if queue in self.weights and self.demand[queue] > 0:
            self.demand[queue] += n  # it could use the freed slots again
        if self.held[queue] == 0 and queue not in self.weights:
            del self.held[queue]
        self.ceiling = max(self.total, min(self.ceiling, sum(self.held.values())))

    @rule(queue=st.sampled_from(QUEUES))
    def clear_demand(self, queue: str) -> None:
        if queue not in self.weights:
            return
        assert self.pool.try_acquire(queue, 0, now=self.now) == 0
        self.demand[queue] = 0
        if self.held[queue] == 0:
            assert queue not in self.pool.contenders

    @rule(total=st.integers(0, 30), weights=weights_strategy)
    def reconfigure(self, total: int, weights: dict[str, int]) -> None:
        self.pool.reconfigure(total, weights, now=self.now)
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
        assert self.pool.contenders == self.contenders()

    @invariant()
    def shares_are_the_water_fill_and_targets_round_them(self) -> None:
        contending = {q for q in self.contenders() if q in self.weights}
        removed_held = sum(n for q, n in self.held.items() if q not in self.weights)
        caps = {q: self.held[q] + self.demand[q] for q in contending}
        expected = water_fill(
            Fraction(max(0, self.total - removed_held)),
            {q: self.weights[q] for q in contending},
            {q: Fraction(cap) for q, cap in caps.items()},
        )
        targets = {q: self.pool.target(q, now=self.now) for q in contending}
        for queue in contending:
            share = self.pool.share(queue)
            assert share == pytest.approx(float(expected[queue]), abs=1e-9)
            assert math.floor(expected[queue]) <= targets[queue] <= math.ceil(expected[queue])
        assert sum(targets.values()) <= max(self.total - removed_held, 0)
        if sum(caps.values()) >= self.total - removed_held:  # enough demand: the whole pool is targeted
            assert sum(targets.values()) == max(self.total - removed_held, 0)

    @invariant()
    def waiting_queues_are_below_target_with_demand(self) -> None:
        for queue in self.pool.waiting(now=self.now):
            assert self.demand[queue] > 0
            assert self.held[queue] < self.pool.target(queue, now=self.now)

    @invariant()
    def sum_held_never_exceeds_total_except_after_a_shrink(self) -> None:
        assert self.pool.held_total <= self.ceiling


TestOverflowPoolProperties = OverflowPoolMachine.TestCase
TestOverflowPoolProperties.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
