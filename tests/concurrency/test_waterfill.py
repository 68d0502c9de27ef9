"""The weighted water-fill that queues and fair keys share: its properties, tested once.

The overflow pool (tests/concurrency/test_pool.py) and the admin's key shares check that they
use it; here it is checked against its definition, in exact fractions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.concurrency.waterfill import water_fill, water_level

NAMES = "abcdefgh"
weights_st = st.dictionaries(st.sampled_from(NAMES), st.integers(1, 9), min_size=1, max_size=len(NAMES))
amount_st = st.fractions(min_value=0, max_value=60, max_denominator=12)
total_st = amount_st | st.integers(0, 60).map(Fraction)


@st.composite
def contenders(draw: st.DrawFn) -> tuple[Fraction, dict[str, int], dict[str, Fraction | None]]:
    weights = draw(weights_st)
    caps = {name: draw(st.none() | amount_st) for name in weights}
    return draw(total_st), weights, caps


def _bounded(caps: dict[str, Fraction | None]) -> Fraction | None:
    """The sum of caps, or None when a contender has none."""
    if any(cap is None for cap in caps.values()):
        return None
    return sum((cap for cap in caps.values() if cap is not None), Fraction(0))


@settings(max_examples=300, deadline=None)
@given(contenders())
def test_water_fill__matches_the_definition(case: tuple[Fraction, dict[str, int], dict[str, Fraction | None]]) -> None:
    """Shares sum to min(total, sum of caps), none above its cap, and there is one level (share per
    weight) that every contender below its cap is at and no contender is above."""
    total, weights, caps = case
    shares = water_fill(total, weights, caps)
    assert set(shares) == set(weights)
    bounded = _bounded(caps)
    assert sum(shares.values()) == (total if bounded is None else min(total, bounded))
    for name, share in shares.items():
        cap = caps[name]
        assert 0 <= share and (cap is None or share <= cap)
    below_cap = [name for name in weights if (cap := caps[name]) is None or shares[name] < cap]
    if below_cap:
        level = shares[below_cap[0]] / weights[below_cap[0]]
        assert all(shares[name] / weights[name] == level for name in below_cap)
        assert all(shares[name] / weights[name] <= level for name in weights)


@settings(max_examples=200, deadline=None)
@given(contenders(), st.sampled_from(NAMES), st.integers(1, 9))
def test_water_fill__monotone_in_total_cap_and_weight(
    case: tuple[Fraction, dict[str, int], dict[str, Fraction | None]], name: str, more: int
) -> None:
    """More capacity lowers no share; a contender's higher cap or weight lowers not its own share
    and raises no other's."""
    total, weights, caps = case
    if name not in weights:
        name = next(iter(weights))
    before = water_fill(total, weights, caps)
    grown = water_fill(total + more, weights, caps)
    assert all(grown[n] >= before[n] for n in weights)
    cap = caps[name]
    for changed in (
        water_fill(total, weights, {**caps, name: None if cap is None else cap + more}),
        water_fill(total, {**weights, name: weights[name] + more}, caps),
    ):
        assert changed[name] >= before[name]
        assert all(changed[n] <= before[n] for n in weights if n != name)


@settings(max_examples=100, deadline=None)
@given(total_st, st.integers(1, 9), st.none() | amount_st)
def test_water_fill__a_lone_contender_gets_all_it_can_use(total: Fraction, weight: int, cap: Fraction | None) -> None:
    assert water_fill(total, {"a": weight}, {"a": cap}) == {"a": total if cap is None else min(total, cap)}


@settings(max_examples=200, deadline=None)
@given(contenders())
def test_water_fill__floats_agree_with_exact_fractions(
    case: tuple[Fraction, dict[str, int], dict[str, Fraction | None]],
) -> None:
    total, weights, caps = case
    exact = water_fill(total, weights, caps)
    floats = water_fill(float(total), weights, {n: None if c is None else float(c) for n, c in caps.items()})
    assert floats == pytest.approx({n: float(s) for n, s in exact.items()}, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.lists(st.tuples(st.integers(1, 30), st.integers(1, 6)), min_size=1, max_size=10))
def test_water_level__groups_of_one_cap_per_weight_settle_as_their_members_do(
    total: int, members: list[tuple[int, int]]
) -> None:
    """The pool walks groups of contenders with one cap per weight (so a decision costs O(groups)):
    they cap together, and the water settles where it does over the members one by one."""

    def ratio(member: tuple[int, int]) -> Fraction:
        return Fraction(*member)

    members.sort(key=ratio)
    runs = [list(run) for _, run in itertools.groupby(members, key=ratio)]
    weight = sum(w for _, w in members)
    groups = [(sum(c for c, _ in run), sum(w for _, w in run)) for run in runs]
    capped, left, rest = water_level(total, groups, weight)
    capped_members, left_members, rest_members = water_level(total, members, weight)
    assert (left, rest) == (left_members, rest_members)
    assert capped_members == sum(len(run) for run in runs[:capped])
    assert isinstance(left, int)  # whole slots stay whole: the pool's floors are exact


@pytest.mark.parametrize(
    ("total", "weights", "caps", "shares"),
    [
        pytest.param(20, {"a": 3, "b": 1}, {}, {"a": 15, "b": 5}, id="three_to_one"),
        pytest.param(10, {"a": 1, "b": 1, "c": 1}, {}, {q: Fraction(10, 3) for q in "abc"}, id="thirds"),
        pytest.param(10, {"a": 1, "b": 1, "c": 2}, {"a": 1}, {"a": 1, "b": 3, "c": 6}, id="capped_leaves_the_rest"),
        pytest.param(4, {"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2}, id="caps_below_total"),
        pytest.param(0, {"a": 1, "b": 5}, {"b": 3}, {"a": 0, "b": 0}, id="nothing_to_share"),
    ],
)
def test_water_fill__cases(
    total: int, weights: dict[str, int], caps: dict[str, int], shares: dict[str, Fraction | int]
) -> None:
    assert water_fill(Fraction(total), weights, {n: Fraction(c) for n, c in caps.items()}) == shares


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: water_fill(-1.0, {"a": 1}, {}), "total must be a number of at least 0, got -1.0"),
        (lambda: water_fill(float("nan"), {"a": 1}, {}), "total must be a number of at least 0, got nan"),
        (lambda: water_fill(1.0, {"a": 0}, {}), "weight of 'a' must be an integer of at least 1, got 0"),
        (lambda: water_fill(1.0, {"a": True}, {}), "weight of 'a' must be an integer of at least 1, got True"),
        (lambda: water_fill(1.0, {"a": 1}, {"a": -2.0}), "cap of 'a' must be a number of at least 0 or None, got -2.0"),
    ],
)
def test_water_fill__bad_input__names_the_value(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
