"""Fairness over time: the allocator with the writer's hand-over, on a virtual clock.

The promise (docs in `awa_django/concurrency/pool.py`): every continuously loaded queue's
long-run average running count approaches its ideal, the weighted water-fill of the overflow
among the queues that can use it (an empty queue nothing, a rate-limited one at most
rate x duration) plus its floor; a queue with backlog is served within a bounded number of
releases; and the sum in flight never passes the global maximum (asserted at every start in
`simulation.simulate`).
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.concurrency.simulation import QueueSpec, ideal_shares, simulate

DURATIONS = (0.05, 0.1, 0.2, 0.3)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, list[QueueSpec]]:
    global_max = draw(st.integers(1, 12))
    count = draw(st.integers(1, 5))
    floors_left = global_max
    specs = []
    for index in range(count):
        floor = draw(st.integers(0, min(2, floors_left)))
        floors_left -= floor
        rate = draw(st.none() | st.sampled_from([1, 2, 5, 10, 20]))
        specs.append(
            QueueSpec(
                name=f"q{index}",
                weight=draw(st.integers(1, 10)),
                min_workers=floor,
                duration=draw(st.sampled_from(DURATIONS)),
                rate=rate,
                arrives=draw(st.sampled_from([0.0, 0.0, 1.0, 2.5])),
                loaded=draw(st.booleans()) if index else True,
            )
        )
    return global_max, specs


def rate_limited_lower_bound(global_max: int, specs: list[QueueSpec], spec: QueueSpec, ceiling: float) -> float:
    """The least average running count the rule guarantees a loaded rate-limited queue, whose
    ceiling (rate x duration, or its water-filled share if smaller) is `ceiling`.

    Its bucket (rate r, burst b = ceil(r)) earns nothing while full, so every second one of its
    tokens waits for a slot is lost to it: what it runs depends on how long its tokens wait.

    * Its share when it contends is at least s = P x w / W (P the overflow pool, G minus the
      floors; w its weight; W the weights of every loaded queue, all of which may contend): capping
      the others only raises it, and if it is capped itself its share is all it asks for. Its target
      is then at least min(what it asks, floor(s)), plus its f local slots.
    * If f + floor(s) >= b, no rank stands between a token and a slot: a token that comes while
      every slot is busy waits for the next release (nothing is taken back), at most one longest
      job L per burst. A burst takes b / r to refill, so it runs at least
      ceiling x (b / r) / (b / r + L).
    * Otherwise the credit ledger decides when its token is served, and the ledger makes it pay
      for every overflow slot-second it holds with credit earned at its share. It joins level with
      the average contender (less what it still owes) and leaves with no more than it is owed
      ("use it or lose it"), so over each visit the slot-seconds it holds are at most what it
      earns, its share times the time it contends. Earning the slot for one job of duration d
      takes d / (f + s) seconds of contending (its run included; its local slots need no credit),
      before which it waits 1 / r for the token, without contending; once it leads, the slot comes
      at the next release, within one longest job. So each job costs at most
      1 / r + d / (f + s) + L seconds, and it runs at least d / (1 / r + d / (f + s) + L),
      however many neighbours are busy: with a small share (many or heavy neighbours) that is
      well under the one-wait bound above. Its wait per token is a rotation of its fractional
      share, not a slot the allocator withholds.

    What this leaves out is bounded by a job or so per visit and goes either way: the debt it
    comes back with halves every `DEBT_HALF_LIFE` seconds away, and the level it joins at drifts
    while the rotation moves credit between neighbours of unequal weights; the caller's 10 %
    covers it (held over 2,000 random cases, not only the fixed 200).
    """
    assert spec.rate is not None
    burst = math.ceil(spec.rate)
    refill = burst / spec.rate
    longest = max(s.duration for s in specs)
    released = ceiling * refill / (refill + longest)
    pool = global_max - sum(s.min_workers for s in specs)
    loaded_weight = sum(s.weight for s in specs if s.loaded)
    if spec.min_workers + pool * spec.weight // loaded_weight >= burst:  # f + floor(s), exactly
        return released
    slots = spec.min_workers + pool * spec.weight / loaded_weight
    if slots == 0:
        return 0.0  # no floor and no pool: it can never run (its ceiling is 0 too)
    return min(released, spec.duration / (1 / spec.rate + spec.duration / slots + longest))


def _check(global_max: int, specs: list[QueueSpec], until: float = 150.0) -> None:
    warmup = max(s.arrives for s in specs) + 10.0
    # A queue whose share is a sliver runs one job now and then: run long enough that its
    # average is made of ~40 of its jobs, so one job more or less is within the 5 %.
    smallest = min((v for v in ideal_shares(global_max, specs).values() if v > 0), default=1)
    until = warmup + max(until, 40 * max(s.duration for s in specs) / float(smallest))
    result = simulate(global_max, specs, until=until, warmup=warmup)
    # A rate-limited queue uses at most rate x duration, less the time its tokens wait for a slot
    # (`rate_limited_lower_bound`). The others' ideal is the water-fill beside what it used.
    longest, shortest = max(s.duration for s in specs), min(s.duration for s in specs)
    limited = {s.name: result.average(s.name) for s in specs if s.rate is not None}
    ideal = ideal_shares(global_max, specs, used=limited)
    cap = ideal_shares(global_max, specs)
    assert result.max_in_flight <= global_max
    steady = [s for s in specs if s.loaded and s.rate is None]
    pool = global_max - sum(s.min_workers for s in specs)
    loaded_weight = sum(s.weight for s in specs if s.loaded)
    for spec in specs:
        measured = result.average(spec.name)
        if not spec.loaded:
            assert measured == 0.0
            continue
        if spec.rate is not None:
            # At most rate x duration, or its water-filled share beside what the other rate-limited
            # queues used: what they leave while their tokens wait goes to the others, this one too
            # (work-conserving). At least what the rule guarantees it with every neighbour at its
            # full rate (`cap`, never more than that).
            others = {name: used for name, used in limited.items() if name != spec.name}
            ceiling = float(ideal_shares(global_max, specs, used=others)[spec.name])
            floor = rate_limited_lower_bound(global_max, specs, spec, float(cap[spec.name])) * 0.90
            assert floor <= measured <= ceiling * 1.10, (spec.name, measured, floor, ceiling)
            continue
        # The long-run ideal: the water-fill where each queue can use at most what it did use if it
        # is rate-limited (rate x duration, less its token waits), an empty queue nothing.
        # Beside a rate-limited queue, whose tokens come one at a time and wait for a slot (nothing
        # is taken back), the integer rotation is coarser: within 10 %; otherwise within 5 %.
        expected = float(ideal[spec.name])
        tolerance = 0.10 if limited else 0.05
        assert math.isclose(measured, expected, rel_tol=tolerance, abs_tol=1e-9), (
            f"{spec.name}: averaged {measured:.3f} running, ideal {expected:.3f} (±{tolerance:.0%})"
        )
        # Served within a bounded number of releases: its credit outgrows any other's (each stays
        # within about one longest job) after ~longest/share seconds. The share that counts is the
        # one in force while it waits, at least its floor plus its weight's part of the pool among
        # every loaded queue: a rate-limited neighbour that comes for one job takes its whole weight
        # while it contends, however little it runs over time (so not the long-run ideal).
        contending = spec.min_workers + pool * spec.weight / loaded_weight
        if fair_share := min(float(ideal[spec.name]), contending):
            bound = global_max * (longest / shortest) * (1 / fair_share + 1) + global_max
            assert result.max_wait_releases[spec.name] <= bound, (spec.name, result.max_wait_releases, bound)
    # What the loaded queues run beyond their floors is split by weight, whatever their neighbours
    # leave unused (a rate-limited queue waiting for tokens, a floor it does not fill).
    over = {s.name: result.average(s.name) - s.min_workers for s in steady}
    for a in steady:
        for b in steady:
            if a.name < b.name and over[a.name] > 0.05 and over[b.name] > 0.05:
                assert math.isclose(
                    over[a.name] / a.weight, over[b.name] / b.weight, rel_tol=0.10 if limited else 0.05
                ), (
                    f"{a.name} ran {over[a.name]:.3f} over its floor with weight {a.weight}, "
                    f"{b.name} {over[b.name]:.3f} with weight {b.weight}"
                )


# Cases (shrunk from a random search) that a bound of one release of wait per burst is too tight
# for: each is a rate-1 queue with a share of 1/6 whose token waits its turn in the rotation.
# Beside four steady queues on one slot: 0.0423 running against 0.0429. The same case holds the
# steady queues to the served-within-releases bound where neighbours tie in exact arithmetic (the
# pool's tie-breaks must rank them, not float rounding, or the weight-1 ones wait 9 releases against
# 7.2), and the weight-2 one to the share in force while the rate-limited queue contends (1/3), not
# its long-run share (0.38).
BESIDE_FOUR_STEADY_QUEUES = (
    1,
    [QueueSpec("q0", rate=1, duration=0.05)]
    + [QueueSpec(f"q{i}", weight=1 + (i == 4), duration=0.05) for i in range(1, 5)],
)
# Beside a heavy queue with a floor: 0.0427 against 0.0429.
BESIDE_A_HEAVY_FLOORED_QUEUE = (
    2,
    [
        QueueSpec("q0", duration=0.05),
        QueueSpec("q1", rate=1, duration=0.05),
        QueueSpec("q2", weight=4, min_workers=1, duration=0.05),
    ],
)
# Unshrunk, and the furthest under: 0.0627 against 0.0692 (its token waited 0.59 s on average, while
# the weight-4 queue, ranked above it, handed its permit to itself every 0.05 s).
BESIDE_A_HEAVY_QUEUE_AND_A_SLOW_ONE = (
    2,
    [
        QueueSpec("q0", rate=1, duration=0.1),
        QueueSpec("q1", duration=0.3),
        QueueSpec("q2", weight=4, min_workers=1, duration=0.05),
    ],
)

# Above a ceiling that takes q0 and q3 at their full rate (0.385 against 0.321 + 10 %): q3's tokens
# wait, and what it leaves goes to q4 and q2.
BESIDE_RATE_LIMITED_NEIGHBOURS_WHOSE_TOKENS_WAIT = (
    3,
    [
        QueueSpec("q0", weight=10, duration=0.1, rate=2, arrives=1.0),
        QueueSpec("q1", weight=1, min_workers=2, duration=0.2, rate=20, loaded=False),
        QueueSpec("q2", weight=5, duration=0.3),
        QueueSpec("q3", weight=9, duration=0.3, rate=1, arrives=2.5),
        QueueSpec("q4", weight=9, duration=0.1, rate=5, arrives=1.0),
    ],
)

# CI runs a fixed set of 50 generated cases beside the four pinned ones (200 took 130 s of a
# parallel run's time; HYPOTHESIS_PROFILE=thorough runs 500). To search further, run random ones
# instead: AWA_FAIRNESS_SEARCH=2000 python -m pytest tests/concurrency/test_fairness_properties.py
SEARCH = int(os.environ.get("AWA_FAIRNESS_SEARCH", "0"))


@settings(
    max_examples=SEARCH or 50,
    deadline=None,
    derandomize=not SEARCH,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(scenario=scenarios())
@example(scenario=BESIDE_FOUR_STEADY_QUEUES)
@example(scenario=BESIDE_A_HEAVY_FLOORED_QUEUE)
@example(scenario=BESIDE_A_HEAVY_QUEUE_AND_A_SLOW_ONE)
@example(scenario=BESIDE_RATE_LIMITED_NEIGHBOURS_WHOSE_TOKENS_WAIT)
def test_long_run_share__every_loaded_queue_within_5_percent_of_its_water_filled_ideal(
    scenario: tuple[int, list[QueueSpec]],
) -> None:
    _check(*scenario)


@pytest.mark.parametrize(
    ("global_max", "specs"),
    [
        pytest.param(10, [QueueSpec("A", weight=10), QueueSpec("B", weight=1, arrives=5)], id="weight_1_newcomer"),
        pytest.param(4, [QueueSpec(name) for name in "ABCDE"], id="five_equal_queues_global_4"),
        pytest.param(10, [QueueSpec("A", loaded=False), QueueSpec("B")], id="beside_an_empty_queue"),
        pytest.param(10, [QueueSpec("A", rate=2), QueueSpec("B")], id="beside_a_rate_limited_queue"),
        pytest.param(
            24,
            [
                QueueSpec("A", weight=3, min_workers=2, duration=0.05),
                QueueSpec("B", weight=1, min_workers=2, duration=0.05),
            ],
            id="17_to_7",
        ),
        pytest.param(1, [QueueSpec("A", weight=1000), QueueSpec("B", weight=1)], id="one_slot_weight_1000_to_1"),
    ],
)
def test_long_run_share__the_issue_scenarios(global_max: int, specs: list[QueueSpec]) -> None:
    _check(global_max, specs, until=300.0)


def test_newcomer__weight_1_beside_weight_10_starts_at_the_next_release() -> None:
    specs = [QueueSpec("A", weight=10), QueueSpec("B", weight=1, arrives=5.0)]
    result = simulate(10, specs, until=20.0)
    started = result.first_start["B"]
    assert started is not None and started <= 5.0 + 0.1  # within one of A's 100 ms jobs
