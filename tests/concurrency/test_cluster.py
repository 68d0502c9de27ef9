"""The cluster planner: reduce before grant keeps the committed sum under the maximum while caps
move between workers that apply them late, and the cluster's long-run split follows the weights.

A model of the protocol: each round the leader plans from the workers' last reports and
publishes; each worker, at random, applies what is published (or not yet), starts jobs up to
the cap it applies, and finishes some. Asserted at every step: the jobs running over all
workers never exceed the global maximum (hard-reserved: each queue's max_workers), and the
capacity committed by the plan never does either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.concurrency import QueueLimits, cluster
from awa_django.concurrency.cluster import ClusterPlanner, QueueUse, WorkerView
from tests.concurrency.linecount import lines_run


@dataclass
class _Worker:
    """A worker as the protocol sees it: what it last reported, what it read back then, and what
    it really enforces and runs now (which the leader cannot see until its next report)."""

    name: str
    queues: list[str]
    held: dict[str, int] = field(default_factory=dict)
    enforced: dict[str, int] = field(default_factory=dict)
    reported: dict[str, int] = field(default_factory=dict)  # held at its last report
    reported_applied: dict[str, int] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    loaded: dict[str, bool] = field(default_factory=dict)

    def report(self) -> None:
        """One report_capacity round trip: send held and applied caps, read the published ones,
        apply them."""
        self.reported = dict(self.held)
        self.reported_applied = dict(self.enforced)
        self.read = dict(self.published)
        self.enforced = dict(self.read)

    def view(self) -> WorkerView:
        use = {q: QueueUse(self.reported.get(q, 0), 100 if self.loaded.get(q) else 0) for q in self.queues}
        return WorkerView(self.name, use, dict(self.reported_applied), dict(self.published), dict(self.read))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[int | None, dict[str, QueueLimits], list[_Worker]]:
    names = ["a", "b", "c"][: draw(st.integers(1, 3))]
    weighted = draw(st.booleans())
    limits = {
        q: QueueLimits(
            max_workers=draw(st.integers(1, 8)),
            min_workers=draw(st.integers(0, 2)) if weighted else 0,
            weight=draw(st.integers(1, 5)),
        )
        for q in names
    }
    global_max = sum(lim.min_workers for lim in limits.values()) + draw(st.integers(0, 10)) if weighted else None
    workers = []
    for i in range(draw(st.integers(1, 4))):
        served = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        workers.append(_Worker(f"w{i}", served, loaded={q: draw(st.booleans()) for q in served}))
    return global_max, limits, workers


@settings(max_examples=150, deadline=None)
@given(cluster=clusters(), data=st.data())
def test_plan__committed_and_running_never_exceed_the_maximum_while_caps_move(
    cluster: tuple[int | None, dict[str, QueueLimits], list[_Worker]], data: st.DataObject
) -> None:
    global_max, limits, workers = cluster
    planner = ClusterPlanner()
    for round_ in range(30):
        views = [w.view() for w in workers]
        plan = planner.plan(global_max, limits, views, now=float(round_))
        if global_max is not None:
            base = sum(
                v.committed(q) for v in views for q in set(v.use) | set(v.applied) | set(v.read) | set(v.published)
            )
            assert plan.committed(views) <= max(global_max, base)
        for w in workers:
            w.published = dict(plan.caps[w.name])
            assert all(plan.floors[w.name].get(q, 0) <= c for q, c in plan.caps[w.name].items())
        for w in workers:
            # Between two plans a worker reports (or not: slow, or dead), runs up to the caps it
            # enforces, and finishes some jobs, in an order hypothesis picks.
            for step in data.draw(st.permutations(["report", "run", "finish"]), label=f"{w.name} round {round_}"):
                if step == "report" and data.draw(st.booleans(), label="reports"):
                    w.report()
                elif step == "run":
                    for q in w.queues:
                        if w.loaded.get(q):
                            w.held[q] = max(w.held.get(q, 0), w.enforced.get(q, 0))
                elif step == "finish":
                    for q in w.queues:
                        w.held[q] = w.held.get(q, 0) - data.draw(st.integers(0, w.held.get(q, 0)), label="finished")
            if data.draw(st.integers(0, 9)) == 0:  # load comes and goes
                q = data.draw(st.sampled_from(w.queues))
                w.loaded[q] = not w.loaded.get(q)
        running = sum(sum(w.held.values()) for w in workers)
        if global_max is not None:
            assert running <= global_max
        else:
            for q, lim in limits.items():
                assert sum(w.held.get(q, 0) for w in workers) <= lim.max_workers


def test_plan__steady_split_follows_the_weights_across_workers() -> None:
    """Global 12, A (min 2, weight 3) on three workers, B (min 2, weight 1) on two: 8 : 4."""
    limits = {"A": QueueLimits(min_workers=2, weight=3), "B": QueueLimits(min_workers=2, weight=1)}
    workers = [
        _Worker("w1", ["A", "B"], loaded={"A": True, "B": True}),
        _Worker("w2", ["A", "B"], loaded={"A": True, "B": True}),
        _Worker("w3", ["A"], loaded={"A": True}),
    ]
    planner = ClusterPlanner()
    totals = {"A": 0, "B": 0}
    for round_ in range(60):
        plan = planner.plan(12, limits, [w.view() for w in workers], now=round_ * 0.5)
        for w in workers:
            w.published = dict(plan.caps[w.name])
            w.report()
            for q in w.queues:
                w.held[q] = w.enforced.get(q, 0)  # always loaded: runs its cap
        if round_ >= 10:
            for q in totals:
                totals[q] += sum(w.held.get(q, 0) for w in workers)
    rounds = 50
    assert (totals["A"] / rounds, totals["B"] / rounds) == (8, 4)
    # The new worker's part: w3 serves only A and gets a share of it.
    assert workers[2].held["A"] > 0


def test_plan__rate_limit_is_split_across_the_workers_serving_the_queue() -> None:
    limits = {"R": QueueLimits(rate_limit=6.0)}
    workers = [_Worker(f"w{i}", ["R"], loaded={"R": True}) for i in range(3)]
    plan = ClusterPlanner().plan(None, limits, [w.view() for w in workers], now=0.0)
    rates = [plan.rates[w.name]["R"] for w in workers]
    assert abs(sum(rates) - 6.0) < 1e-9


def _reference_reduce_before_grant(
    global_max: int | None,
    limits: Mapping[str, QueueLimits],
    workers: Sequence[WorkerView],
    desired: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """The rule as it was first written: one slot at a time, in rounds, to the largest gap first
    (ties by queue, then worker), until the budget (the global maximum's, or in hard-reserved mode
    each queue's max_workers') or the gaps run out. Its cost grows with the slots it hands out."""
    caps: dict[str, dict[str, int]] = {w.worker: {} for w in workers}
    pending: list[list[Any]] = []  # [queue, worker, cap, want]
    committed: dict[str, int] = {}
    for w in workers:
        for queue in sorted(set(w.use) | set(w.applied) | set(w.read) | set(w.published)):
            base = w.committed(queue)
            want = desired.get(w.worker, {}).get(queue, 0)
            committed[queue] = committed.get(queue, 0) + base
            caps[w.worker][queue] = min(want, base)
            if want > base:
                pending.append([queue, w.worker, base, want])
    budgets = {q: limits[q].max_workers - committed.get(q, 0) for q in limits}
    left = (global_max or 0) - sum(committed.values())
    while pending:
        pending.sort(key=lambda p: (p[2] - p[3], p[0], p[1]))
        for entry in pending:
            if global_max is None:
                if budgets.get(entry[0], 0) <= 0:
                    continue
                budgets[entry[0]] -= 1
            elif left <= 0:
                break
            else:
                left -= 1
            entry[2] += 1
            caps[entry[1]][entry[0]] = entry[2]
        still = [p for p in pending if p[2] < p[3]]
        if global_max is not None and left <= 0:
            break
        if global_max is None and all(budgets.get(p[0], 0) <= 0 for p in still):
            break
        pending = still
    return caps


@st.composite
def grant_cases(
    draw: st.DrawFn,
) -> tuple[int | None, dict[str, QueueLimits], list[WorkerView], dict[str, dict[str, int]]]:
    """Workers' committed caps and the caps the plan would like, around maxima from tiny to huge
    (the reference hands out one slot per step, so the wants stay within a few thousand of what
    is committed)."""
    huge = st.sampled_from([10**6, 2**31 - 1])
    maximum = st.one_of(st.integers(1, 40), huge)
    names = ["a", "b", "c", "d"][: draw(st.integers(1, 4))]
    weighted = draw(st.booleans())
    limits = {q: QueueLimits(max_workers=draw(maximum)) for q in names}
    small = st.integers(0, 30)
    workers: list[WorkerView] = []
    desired: dict[str, dict[str, int]] = {}
    for index in range(draw(st.integers(1, 5))):
        name = f"w{index}"
        queues = draw(st.lists(st.sampled_from([*names, "unknown"]), unique=True, max_size=len(names) + 1))
        use = {q: QueueUse(draw(small), draw(small)) for q in queues}
        applied = {q: draw(small) for q in queues if draw(st.booleans())}
        read = {q: draw(small) for q in queues if draw(st.booleans())}
        published = {q: draw(small) for q in queues if draw(st.booleans())}
        workers.append(WorkerView(name, use, applied, published, read))
        desired[name] = {q: draw(st.integers(0, 2_000)) for q in queues if draw(st.integers(0, 4))}
    global_max = draw(st.one_of(maximum, st.integers(0, 200))) if weighted else None
    return global_max, limits, workers, desired


@settings(max_examples=400, deadline=None)
@given(case=grant_cases())
def test_reduce_before_grant__computed_caps_match_the_slot_by_slot_rule(
    case: tuple[int | None, dict[str, QueueLimits], list[WorkerView], dict[str, dict[str, int]]],
) -> None:
    global_max, limits, workers, desired = case
    planned = ClusterPlanner._reduce_before_grant(global_max, limits, workers, desired)
    assert planned == _reference_reduce_before_grant(global_max, limits, workers, desired)


@pytest.mark.parametrize("maximum", [100, 100_000, 2**31 - 1])
def test_reduce_before_grant__a_huge_maximum_is_granted_whole_in_one_step(maximum: int) -> None:
    """A worker that wants a whole queue of max_workers 2**31 - 1 gets it: the slot-by-slot rule
    would have taken that many turns; the computed one takes none per slot."""
    limits = {"a": QueueLimits(max_workers=maximum), "b": QueueLimits(max_workers=maximum)}
    workers = [WorkerView("w1", {"a": QueueUse(0, maximum)}), WorkerView("w2", {"a": QueueUse(1, 1), "b": QueueUse()})]
    desired = {"w1": {"a": maximum - 1}, "w2": {"a": 1, "b": maximum}}
    hard = ClusterPlanner._reduce_before_grant(None, limits, workers, desired)
    assert hard == {"w1": {"a": maximum - 1}, "w2": {"a": 1, "b": maximum}}
    # Weighted: one global budget, shared by rounds (largest gap first) when it is short.
    weighted = ClusterPlanner._reduce_before_grant(maximum, limits, workers, desired)
    assert weighted["w2"]["a"] == 1
    assert weighted["w1"]["a"] + weighted["w2"]["b"] == maximum - 1
    assert abs(weighted["w1"]["a"] - weighted["w2"]["b"]) <= 1


def _lines_run(maximum: int) -> int:
    """How many lines of cluster.py one reduce-before-grant runs, for the case above: an operation
    count, the same on every machine (a time would not be)."""
    limits = {"a": QueueLimits(max_workers=maximum), "b": QueueLimits(max_workers=maximum)}
    workers = [WorkerView("w1", {"a": QueueUse(0, maximum)}), WorkerView("w2", {"a": QueueUse(1, 1), "b": QueueUse()})]
    desired = {"w1": {"a": maximum - 1}, "w2": {"a": 1, "b": maximum}}

    def both_modes() -> None:
        ClusterPlanner._reduce_before_grant(maximum, limits, workers, desired)
        ClusterPlanner._reduce_before_grant(None, limits, workers, desired)

    return lines_run(cluster.__file__, both_modes)


def test_reduce_before_grant__work_does_not_grow_with_the_maximum() -> None:
    assert _lines_run(10_000) == _lines_run(100)
