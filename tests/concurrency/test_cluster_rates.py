"""The cluster planner's rate parts: reduce before grant, as for the caps.

A model of the protocol: each round the leader plans from the workers' last reports and publishes
each worker's part of the queue's rate; each worker, at random, reports (reads its published part
and runs at it from then on) or not. Its demand comes and goes, and the parts follow the caps,
which follow the demand. Asserted at every step: the parts the workers run at never add up to more
than the queue's rate. And once the load settles and every worker reports, each runs at its part
of the plan, which together are the whole rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.concurrency import QueueLimits
from awa_django.concurrency.cluster import ClusterPlanner, QueueUse, WorkerView


@dataclass
class _Worker:
    name: str
    loaded: bool = False
    reported_load: bool = False
    published: float = 0.0  # its part in its row now
    read: float = 0.0  # the part it read at its last report: what it runs at
    leased: bool = True

    def report(self) -> None:
        """One report_capacity round trip: its demand out, its part (when leased) back and applied."""
        self.reported_load = self.loaded
        if self.leased:
            self.read = self.published

    def view(self) -> WorkerView:
        use = {"R": QueueUse(0, 40 if self.reported_load else 0)}
        return WorkerView(self.name, use, read_rates={"R": self.read} if self.read else {})


def _limits(rate: float, burst: int) -> dict[str, QueueLimits]:
    return {"R": QueueLimits(max_workers=40, rate_limit=rate, rate_burst=burst)}


@settings(max_examples=200, deadline=None)
@given(
    rate=st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 20.0]),
    burst=st.integers(0, 6),
    size=st.integers(2, 4),
    data=st.data(),
)
def test_rates__the_parts_the_workers_run_at_never_add_up_to_more_than_the_rate(
    rate: float, burst: int, size: int, data: st.DataObject
) -> None:
    workers = [_Worker(f"w{i}") for i in range(size)]
    planner = ClusterPlanner()
    for round_ in range(25):
        for w in workers:
            if data.draw(st.integers(0, 2), label="load flips") == 0:
                w.loaded = not w.loaded
        plan = planner.plan(None, _limits(rate, burst), [w.view() for w in workers], now=float(round_))
        for w in workers:
            w.published = plan.rates[w.name]["R"]
            assert w.published >= 0.0
        for w in data.draw(st.permutations(workers), label="who reports, in order"):
            if data.draw(st.booleans(), label=f"{w.name} reports"):
                w.report()
            running = sum(x.read for x in workers)
            assert running <= rate + 1e-9, [(x.name, x.read) for x in workers]
    # The load settles; every worker reports after each plan: the parts reach the plan's, whole.
    for round_ in range(25, 25 + 2 * size + 2):
        plan = planner.plan(None, _limits(rate, burst), [w.view() for w in workers], now=float(round_))
        for w in workers:
            w.published = plan.rates[w.name]["R"]
        for w in workers:
            w.report()
            assert sum(x.read for x in workers) <= rate + 1e-9
    assert sum(w.read for w in workers) == pytest.approx(rate)
    assert [w.read for w in workers] == pytest.approx([plan.rates[w.name]["R"] for w in workers])


def test_rates__a_part_moves_only_after_the_worker_giving_it_up_has_read_its_cut() -> None:
    """Two workers at 1/s each of 2/s; the first's demand moves the whole rate to it. It gets the
    other's part only after the other read its cut: one plan later, not in the same one."""
    a, b = _Worker("a"), _Worker("b")
    planner = ClusterPlanner()
    limits = _limits(2.0, 0)
    plan = planner.plan(None, limits, [a.view(), b.view()], now=0.0)
    for w in (a, b):
        w.published = plan.rates[w.name]["R"]
        w.report()
    assert (a.read, b.read) == (1.0, 1.0)
    a.loaded = True
    a.report()
    plan = planner.plan(None, limits, [a.view(), b.view()], now=1.0)
    assert (plan.rates["a"]["R"], plan.rates["b"]["R"]) == (1.0, 0.0)  # b's cut first; a waits for it
    for w in (a, b):
        w.published = plan.rates[w.name]["R"]
    b.report()
    plan = planner.plan(None, limits, [a.view(), b.view()], now=2.0)
    assert (plan.rates["a"]["R"], plan.rates["b"]["R"]) == (2.0, 0.0)


def test_rates__a_worker_whose_lease_ran_out_is_counted_at_the_part_it_still_runs_at() -> None:
    """A worker that read its part without a lease does not apply it (report_capacity keeps the part
    read before in ``read_rates``): the leader counts it at the part it runs at."""
    a, b = _Worker("a", read=2.0), _Worker("b")
    a.leased = False
    b.loaded = True
    b.report()
    plan = ClusterPlanner().plan(None, _limits(2.0, 0), [a.view(), b.view()], now=0.0)
    assert plan.rates["b"]["R"] == 0.0
