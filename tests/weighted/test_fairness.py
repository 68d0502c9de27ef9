"""The overflow pool splits by weight under contention, and a newly loaded queue gets its share fast.

A (min 2, weight 3) and B (min 2, weight 1) with a global maximum of 24: the pool is
24 - 4 = 20, shared 15:5, so the ideal running split is 17:7.
"""

from __future__ import annotations

import pytest

from awa_django.worker import QueueConfig, WorkerConfig
from tests.harness import make_config, running_worker
from tests.weighted.support import (
    Recorder,
    Sampler,
    between,
    contended,
    enqueue,
    split_problems,
    time_weighted_mean,
)

IDEAL = {"A": 17, "B": 7}
# The tolerances on the time-averaged split are in tests.weighted.support (split_problems).
# The contended window starts this long after both queues first ran, to leave out the initial
# grab (whoever polls first takes the pool; the other gets its share as jobs end: one job
# length, 150 ms, plus a round trip). Convergence itself is measured by its own test below.
WARM_UP = 0.5
CONVERGENCE_BOUND = 2.0  # seconds: the spec's bound


def _config() -> WorkerConfig:
    return make_config(
        {"A": QueueConfig("A", min_workers=2, weight=3), "B": QueueConfig("B", min_workers=2, weight=1)},
        global_max_workers=24,
    )


@pytest.mark.django_db(transaction=True)
def test_weighted__contended_pool_splits_running_by_weight() -> None:
    recorder = Recorder()
    with Sampler(["A", "B"]) as sampler, running_worker(_config(), registry=recorder.registry):
        enqueue("A", 400, ms=150)
        enqueue("B", 170, ms=150)
        sampler.wait_for(lambda s: s.available["A"] == 0 or s.available["B"] == 0, 60, "a queue to run dry")
    samples = sampler.snapshot()
    both = contended(samples, ["A", "B"])
    started = next(s.t for s in both if s.running["A"] > 0 and s.running["B"] > 0)
    window = between(both, started + WARM_UP)
    duration = window[-1].t - window[0].t
    mean_a = time_weighted_mean(window, lambda s: s.running["A"])
    mean_b = time_weighted_mean(window, lambda s: s.running["B"])
    peak_total = max(s.total for s in samples)
    print(
        f"[weighted] proportionality over {duration:.2f}s ({len(window)} samples): "
        f"A {mean_a:.2f} (ideal 17), B {mean_b:.2f} (ideal 7), A's share {mean_a / (mean_a + mean_b):.3f} "
        f"(ideal {17 / 24:.3f}), peak total {peak_total} / 24"
    )
    assert duration >= 1.0, f"the contended window was only {duration:.2f}s: too short to average"
    assert peak_total <= 24
    assert not split_problems(mean_a, mean_b, IDEAL["A"], IDEAL["B"])
    # Neither queue ever runs above its share once both contend (after the initial grab).
    assert max(s.running["A"] for s in window) <= IDEAL["A"]
    assert max(s.running["B"] for s in window) <= IDEAL["B"]


@pytest.mark.django_db(transaction=True)
def test_weighted__newly_loaded_queue_reaches_its_share_within_2s() -> None:
    recorder = Recorder()
    with Sampler(["A", "B"]) as sampler, running_worker(_config(), registry=recorder.registry):
        enqueue("A", 600, ms=150)
        # A alone: its 2 guaranteed slots plus the whole pool of 20.
        sampler.wait_for(lambda s: s.running["A"] == 22, 30, "A to hold the whole pool (22 running)")
        committed = enqueue("B", 150, ms=150)
        reached = sampler.wait_for(lambda s: s.running["B"] >= IDEAL["B"], 30, "B to run its share of 7")
    elapsed = reached.t - committed
    print(
        f"[weighted] convergence: B reached {reached.running['B']} running {elapsed * 1000:.0f}ms after its "
        f"enqueue committed (A then {reached.running['A']}, A still had {reached.available['A']} available)"
    )
    assert reached.available["A"] > 0, "A ran dry first: B did not have to take its share from A"
    assert elapsed < CONVERGENCE_BOUND
