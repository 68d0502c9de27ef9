"""Capacity across every worker (scope "cluster"): the leader's plan of per-worker, per-queue caps.

Each worker reports, per queue it serves, what it holds (permits in flight) and its demand (how
many more it could use now), and which caps it enforces (*applied*). The maintenance leader turns
the reports into caps, one per (worker, queue), that each worker enforces locally, so a claim
never waits for another process; only the caps travel through the database.

The rule, per round:

1. Cluster targets per queue. Hard-reserved: `max_workers`. Weighted: the queue's `min_workers`
   plus its integer target in one `OverflowPool` of `global_max - sum(min_workers)` that the
   planner keeps across rounds (so its credit ledger rotates remainders over time, exactly as in
   one process), fed with each queue's cluster-wide held and demand.
2. Each queue's target is split among the workers serving it: a worker without demand keeps what
   it holds, the rest goes to the workers with demand in proportion to it (a worker that joins
   gets its part as the others' jobs end), what nobody asked for is spread as slack. Nothing is
   taken back: a worker whose cap falls under what it holds starts nothing new until it is under.
3. Reduce before grant. Until it reports again, a worker may take permits up to the largest of
   the cap it applied, the cap it read at its last report (it applies it next) and the cap
   published for it now (it may read it at any moment), and holds what it holds; the sum of
   `max(held, applied, read, published)` over every worker and queue is the capacity committed. A new
   cap above that is granted only from what is left under the global maximum (hard-reserved: under
   the queue's `max_workers`), so capacity moves from one worker to another only after the first
   has dropped below its new, lower cap and said so. The committed sum never exceeds the maximum,
   even while caps move, unless the maximum itself was lowered (then nothing is granted until it
   is back under).

The leader also publishes each worker's *floor* caps, its part of every queue's `min_workers`
(never above its cap): a worker whose caps' lease expires (no leader, or no database) falls back
to those, which together never exceed the sum of the floors. And, for a queue with a rate limit,
each worker's part of the rate: its whole part of the queue's burst (in proportion to its cap)
over the burst, so the workers' buckets together hold the burst and no more. Rate parts move as
caps do, reduce before grant: a worker runs at the part it read at its last report until it
reports again, so a part larger than that is published only from what the others' parts (the
larger of the one each read and the one now published for it) leave under the queue's rate; the
rest keep the part they read. The parts the workers run at never add up to more than the rate.

Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from awa_django.concurrency.limits import QueueLimitsLike
from awa_django.concurrency.pool import OverflowPool


@dataclass(frozen=True)
class QueueUse:
    """One worker's use of one queue, as it reported it."""

    held: int = 0
    demand: int = 0  # how many more it could use now (0: no backlog, paused or no rate tokens)


@dataclass(frozen=True)
class WorkerView:
    """What the leader knows of one live worker."""

    worker: str
    use: Mapping[str, QueueUse]  # per queue it serves
    applied: Mapping[str, int] = field(default_factory=dict)  # the caps it enforced at its last report
    published: Mapping[str, int] = field(default_factory=dict)  # the caps in its row now
    read: Mapping[str, int] = field(default_factory=dict)  # the caps it read at its last report
    read_rates: Mapping[str, float] = field(default_factory=dict)  # the rate parts it read (and applied) then

    def committed(self, queue: str) -> int:
        """What it may run of the queue before it reports again: what it holds, the caps it
        applied, the ones it read last (it applies them right after reading), and the ones in its
        row now (it may read them at any moment)."""
        use = self.use.get(queue, QueueUse())
        return max(use.held, self.applied.get(queue, 0), self.read.get(queue, 0), self.published.get(queue, 0))


@dataclass(frozen=True)
class ClusterPlan:
    caps: dict[str, dict[str, int]]  # worker -> queue -> cap
    floors: dict[str, dict[str, int]]  # worker -> queue -> cap without a lease
    rates: dict[str, dict[str, float]]  # worker -> queue -> its part of the queue's rate limit
    targets: dict[str, int]  # queue -> cluster-wide target
    global_max: int | None

    def committed(self, workers: Sequence[WorkerView]) -> int:
        """The capacity committed once this plan is published: what a worker may reach."""
        return sum(max(w.committed(q), self.caps.get(w.worker, {}).get(q, 0)) for w in workers for q in _queues_of(w))


def _queues_of(worker: WorkerView) -> set[str]:
    return set(worker.use) | set(worker.applied) | set(worker.read) | set(worker.published)


class ClusterPlanner:
    """The leader's planner; keeps the cluster pool (and its credit ledger) between rounds."""

    def __init__(self) -> None:
        self._pool: OverflowPool | None = None

    def plan(
        self,
        global_max: int | None,
        limits: Mapping[str, QueueLimitsLike],
        workers: Sequence[WorkerView],
        now: float,
    ) -> ClusterPlan:
        serving: dict[str, list[WorkerView]] = {q: [] for q in limits}
        for worker in sorted(workers, key=lambda w: w.worker):
            for queue in worker.use:
                if queue in serving:
                    serving[queue].append(worker)
        held = {q: sum(w.use[q].held for w in ws) for q, ws in serving.items()}
        demand = {q: sum(w.use[q].demand for w in ws) for q, ws in serving.items()}
        targets = self._targets(global_max, limits, serving, held, demand, now)

        desired: dict[str, dict[str, int]] = {w.worker: {} for w in workers}
        floors: dict[str, dict[str, int]] = {w.worker: {} for w in workers}
        rates: dict[str, dict[str, float]] = {w.worker: {} for w in workers}
        for queue, ws in serving.items():
            if not ws:
                continue
            split = _split(targets[queue], ws, queue)
            floor = limits[queue].min_workers if global_max is not None else 0
            floor_split = _proportional(min(floor, targets[queue]), [split[w.worker] for w in ws])
            rate = limits[queue].rate_limit
            total_cap = sum(split.values())
            # The rate goes in proportion to whole parts of the queue's burst, themselves in
            # proportion to the caps: a worker's bucket then holds exactly its part of the burst
            # (QueueRunner.set_rate_share), and the parts add up to the burst. Split by the caps
            # alone, each worker rounded its burst up: 5/s over two workers ran 3 + 3 at once.
            burst = 0 if rate is None else limits[queue].rate_burst or math.ceil(rate)
            bursts = _proportional(burst, [split[w.worker] for w in ws]) if total_cap else []
            for i, (w, part) in enumerate(zip(ws, floor_split, strict=True)):
                desired[w.worker][queue] = split[w.worker]
                floors[w.worker][queue] = min(part, split[w.worker])
                if rate is not None:
                    share = bursts[i] / burst if total_cap else 1 / len(ws)
                    rates[w.worker][queue] = rate * share
            if rate is not None:
                _rates_within(rate, queue, ws, rates)
        caps = self._reduce_before_grant(global_max, limits, workers, desired)
        floors = {w: {q: min(f, caps[w].get(q, 0)) for q, f in fs.items()} for w, fs in floors.items()}
        return ClusterPlan(caps, floors, rates, targets, global_max)

    # --- the steps ---------------------------------------------------------------------

    def _targets(
        self,
        global_max: int | None,
        limits: Mapping[str, QueueLimitsLike],
        serving: Mapping[str, list[WorkerView]],
        held: Mapping[str, int],
        demand: Mapping[str, int],
        now: float,
    ) -> dict[str, int]:
        if global_max is None:
            self._pool = None
            return {q: limits[q].max_workers for q in limits}
        floors = {q: limits[q].min_workers for q in limits}
        total = max(0, global_max - sum(floors.values()))
        weights = {q: limits[q].weight for q in limits}
        if self._pool is None:
            self._pool = OverflowPool(total, weights, now=now)
        else:
            self._pool.reconfigure(total, weights, now=now)
        observed = {}
        for queue in limits:
            if not serving[queue]:
                observed[queue] = (0, 0)
                continue
            over_held = max(0, held[queue] - floors[queue])
            over_cap = max(0, held[queue] + demand[queue] - floors[queue])
            observed[queue] = (over_held, over_cap - over_held)
        self._pool.observe(observed, now=now)
        return {q: floors[q] + self._pool.target(q, now=now) for q in limits}

    @staticmethod
    def _reduce_before_grant(
        global_max: int | None,
        limits: Mapping[str, QueueLimitsLike],
        workers: Sequence[WorkerView],
        desired: Mapping[str, Mapping[str, int]],
    ) -> dict[str, dict[str, int]]:
        caps: dict[str, dict[str, int]] = {w.worker: {} for w in workers}
        pending: list[_Increase] = []
        committed_by_queue: dict[str, int] = {}
        for w in workers:
            for queue in _queues_of(w):
                base = w.committed(queue)
                want = desired.get(w.worker, {}).get(queue, 0)
                committed_by_queue[queue] = committed_by_queue.get(queue, 0) + base
                caps[w.worker][queue] = min(want, base)  # a reduction (or no change) is published at once
                if want > base:
                    pending.append(_Increase(queue, w.worker, base, want))
        if global_max is not None:
            _grant_in_rounds(pending, global_max - sum(committed_by_queue.values()))
        else:  # hard-reserved: each queue's budget is its own, shared by its workers only
            by_queue: dict[str, list[_Increase]] = {}
            for entry in pending:
                by_queue.setdefault(entry.queue, []).append(entry)
            for queue, entries in by_queue.items():
                budget = limits[queue].max_workers - committed_by_queue[queue] if queue in limits else 0
                _grant_in_rounds(entries, budget)
        for entry in pending:
            caps[entry.worker][entry.queue] = entry.cap
        return caps


@dataclass
class _Increase:
    queue: str
    worker: str
    cap: int
    want: int


def _grant_in_rounds(increases: Sequence[_Increase], budget: int) -> None:
    """Raise the caps of ``increases`` towards their wants with at most ``budget`` slots, as if one
    slot at a time went to each of them in rounds, the largest gap (``want - cap``) first, ties by
    queue then worker, until the budget or the gaps ran out: so a short budget is shared instead of
    going to whoever comes first.

    Computed, not simulated: ``rounds`` whole rounds give each entry ``min(gap, rounds)``, and the
    slots left (fewer than the entries still short) go one each to the first of those in that
    order. O(n log n) for n increases, whatever the budget and the gaps (a queue's max_workers of
    100,000 once cost 100,000 turns of a loop per plan)."""
    if budget <= 0 or not increases:
        return
    gaps = sorted(entry.want - entry.cap for entry in increases)
    if budget >= sum(gaps):
        for entry in increases:
            entry.cap = entry.want
        return
    # The most whole rounds the budget pays for: between two consecutive gaps, every entry whose
    # gap is not yet closed takes one slot a round.
    rounds = spent = 0
    for index, gap in enumerate(gaps):
        short = len(gaps) - index
        if spent + (gap - rounds) * short > budget:
            more = (budget - spent) // short
            rounds, spent = rounds + more, spent + more * short
            break
        spent += (gap - rounds) * short
        rounds = gap
    order = sorted(
        (entry for entry in increases if entry.want - entry.cap > rounds),
        key=lambda entry: (entry.cap - entry.want, entry.queue, entry.worker),
    )
    for entry in increases:
        entry.cap += min(entry.want - entry.cap, rounds)
    for entry in order[: budget - spent]:
        entry.cap += 1


def _rates_within(rate: float, queue: str, workers: Sequence[WorkerView], rates: dict[str, dict[str, float]]) -> None:
    """Reduce before grant for ``queue``'s rate parts in ``rates`` (worker -> queue -> part, the
    parts planned): a worker runs at the part it read at its last report until it reports again,
    and then at the part published now. A part at or under the one read is published as planned (it
    lowers nothing the sum counts); a larger one only if the sum of what every worker may run at
    (the larger of its part read and its part published) stays within ``rate``, the largest
    increase first (ties by worker); one that does not fit keeps the part read until a later plan,
    after the others have read their cuts."""
    read = {w.worker: max(float(w.read_rates.get(queue, 0.0)), 0.0) for w in workers}
    planned = {w.worker: rates[w.worker][queue] for w in workers}
    published = {worker: min(part, read[worker]) for worker, part in planned.items()}
    left = rate - sum(max(read[worker], part) for worker, part in published.items())
    rising = sorted((w for w in planned if planned[w] > read[w]), key=lambda w: (read[w] - planned[w], w))
    for worker in rising:
        more = planned[worker] - read[worker]
        if more <= left + 1e-9 * max(rate, 1.0):
            published[worker] = planned[worker]
            left -= more
        else:  # not yet: what it runs at now, never more
            published[worker] = read[worker]
    for worker, part in published.items():
        rates[worker][queue] = part


def _split(target: int, workers: Sequence[WorkerView], queue: str) -> dict[str, int]:
    """A queue's cluster target as caps for the workers serving it: a worker without demand keeps
    what it holds (its jobs are finishing); the rest is divided among the workers with demand in
    proportion to it (so a worker that joins gets its part as the others' jobs end), and what
    nobody asked for is spread evenly as slack, so a worker whose queue gets new jobs can start
    them before the next round. Over its target, the caps of the workers holding most are cut."""
    held = [w.use[queue].held for w in workers]
    wants = [w.use[queue].demand for w in workers]
    active = [i for i, d in enumerate(wants) if d > 0]
    caps = [0 if i in active else held[i] for i in range(len(workers))]
    left = target - sum(caps)
    if left < 0:  # over its target even without the workers with demand: cut the largest holders
        cut = -left
        order = sorted(range(len(workers)), key=lambda i: (-caps[i], workers[i].worker))
        while cut > 0:
            for i in order:
                if cut == 0:
                    break
                if caps[i] > 0:
                    caps[i] -= 1
                    cut -= 1
        return {w.worker: c for w, c in zip(workers, caps, strict=True)}
    asked = sum(wants[i] for i in active)
    to_active = min(left, asked)
    for i, extra in zip(active, _proportional(to_active, [wants[i] for i in active]), strict=True):
        caps[i] += extra
    left -= to_active
    for i, extra in enumerate(_proportional(left, [1] * len(workers))):
        caps[i] += extra
    return {w.worker: c for w, c in zip(workers, caps, strict=True)}


def _proportional(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split in proportion to `weights` in whole numbers (largest remainders), each at most
    its weight when the weights sum to at least `total`."""
    if total <= 0 or not weights:
        return [0] * len(weights)
    weight_sum = sum(weights)
    if weight_sum <= 0:
        weights, weight_sum = [1] * len(weights), len(weights)
    parts = [total * w // weight_sum for w in weights]
    rest = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % weight_sum), i))
    for i in order[:rest]:
        parts[i] += 1
    return parts
