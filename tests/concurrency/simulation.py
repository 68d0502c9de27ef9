"""A discrete-event model of one weighted worker, on a virtual clock, to test fairness over time.

It drives the real `Allocator` and `TokenBucket` the way the worker does: a dispatcher per
queue polls (tokens first, then `try_acquire`, then a claim that fills every permit while the
queue has backlog); a finished job's permit goes through the writer's hand-over
(`Allocator.keepable`, then the bucket) or back to the allocator, whose `to_wake()` names the
dispatchers a release wakes; a backstop wakes every dispatcher with backlog once a second.
Only the clock and the database are simulated: what ran is counted from the jobs started.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from fractions import Fraction

from awa_django.concurrency import Allocator, Permit, QueueLimits, TokenBucket
from awa_django.concurrency.waterfill import water_fill


@dataclass(frozen=True)
class QueueSpec:
    name: str
    weight: int = 1
    min_workers: int = 0
    duration: float = 0.1  # every job of the queue runs this long
    rate: float | None = None  # jobs per second
    arrives: float = 0.0  # when its backlog appears
    loaded: bool = True  # False: configured but empty


@dataclass
class Result:
    busy: dict[str, float]  # slot-seconds run per queue after the warm-up
    span: float
    max_in_flight: int
    max_wait_releases: dict[str, int]  # most releases a queue with backlog saw before being served
    first_start: dict[str, float | None]
    shared: dict[str, float]  # the allocator's fractional share of the pool, integrated after the warm-up

    def average_share(self, queue: str) -> float:
        return self.shared[queue] / self.span

    def average(self, queue: str) -> float:
        return self.busy[queue] / self.span


@dataclass
class _Queue:
    spec: QueueSpec
    bucket: TokenBucket | None
    running: int = 0
    waiting_since: int | None = None  # release count when it was last refused with backlog
    poll_at: float | None = None
    extra: list[float] = field(default_factory=list)


def simulate(global_max: int, specs: list[QueueSpec], *, until: float, warmup: float = 0.0) -> Result:
    now = 0.0
    alloc = Allocator.weighted(
        global_max,
        {s.name: QueueLimits(min_workers=s.min_workers, weight=s.weight) for s in specs},
        clock=lambda: now,
    )
    queues = {s.name: _Queue(s, None if s.rate is None else TokenBucket(s.rate, 0, queue=s.name)) for s in specs}
    events: list[tuple[float, int, str, str, Permit | None]] = []
    seq = itertools.count()
    busy = dict.fromkeys(queues, 0.0)
    first_start: dict[str, float | None] = dict.fromkeys(queues)
    max_wait = dict.fromkeys(queues, 0)
    releases = 0
    max_in_flight = 0
    shared = dict.fromkeys(queues, 0.0)
    last = 0.0

    def integrate(until_t: float) -> None:
        nonlocal last
        start_t, end_t = max(last, warmup), min(until_t, until)
        if end_t > start_t:
            for name in queues:
                shared[name] += alloc.share(name) * (end_t - start_t)
        last = max(last, until_t)

    def push(at: float, kind: str, queue: str, permit: Permit | None = None) -> None:
        heapq.heappush(events, (at, next(seq), kind, queue, permit))

    def has_backlog(q: _Queue) -> bool:
        return q.spec.loaded and now >= q.spec.arrives

    def start(q: _Queue, permit: Permit) -> None:
        nonlocal max_in_flight
        q.running += 1
        if first_start[q.spec.name] is None:
            first_start[q.spec.name] = now
        if q.waiting_since is not None:
            max_wait[q.spec.name] = max(max_wait[q.spec.name], releases - q.waiting_since)
            q.waiting_since = None
        end = now + q.spec.duration
        busy[q.spec.name] += max(0.0, min(end, until) - max(now, warmup))
        push(end, "finish", q.spec.name, permit)
        max_in_flight = max(max_in_flight, alloc.total_in_flight)
        assert alloc.total_in_flight <= global_max

    def poll(q: _Queue) -> None:
        """One dispatcher's poll, then the dispatchers it leaves room for (as the worker does:
        a poll that clears or lowers its demand wakes `to_wake()`)."""
        todo = [q]
        while todo:
            poll_one(todo.pop(0))
            todo.extend(queues[name] for name in alloc.to_wake() if queues[name] not in todo)

    def poll_one(q: _Queue) -> None:
        name = q.spec.name
        while True:
            if not has_backlog(q):
                alloc.clear_demand(name)
                return
            wanted = global_max
            if q.bucket is not None:
                tokens = q.bucket.available(now)
                if tokens == 0:
                    alloc.clear_demand(name)  # no tokens: it cannot use a slot now
                    q.waiting_since = None
                    wake_at = now + q.bucket.seconds_until(1, now)
                    if q.poll_at is None or q.poll_at <= now or wake_at < q.poll_at:
                        q.poll_at = wake_at
                        push(wake_at, "poll", name)
                    return
                wanted = min(wanted, tokens)
            permits = alloc.try_acquire(name, wanted)
            if not permits:
                if q.waiting_since is None:
                    q.waiting_since = releases
                return
            if q.bucket is not None:
                q.bucket.take(len(permits), now)
            for permit in permits:  # the claim fills every permit: the backlog is endless
                start(q, permit)

    def finish(q: _Queue, permit: Permit) -> None:
        nonlocal releases
        q.running -= 1
        if has_backlog(q):  # the writer's hand-over: the same queue's next job, if the rules allow
            kept = alloc.keepable(q.spec.name, [permit])
            if kept and (q.bucket is None or q.bucket.take(1, now) == 1):
                start(q, permit)
                return
        releases += 1
        permit.release()
        for name in alloc.to_wake():
            poll(queues[name])

    for q in queues.values():
        push(q.spec.arrives, "poll", q.spec.name)
    backstop = 1.0
    while events:
        at, _, kind, name, permit = heapq.heappop(events)
        if at > until:
            break
        while backstop <= at:  # the worker's backlog probe wakes every dispatcher with backlog
            integrate(backstop)
            now = backstop
            for q in queues.values():
                if has_backlog(q):
                    poll(q)
            backstop += 1.0
        integrate(at)
        now = at
        if kind == "finish":
            assert permit is not None
            finish(queues[name], permit)
        else:
            poll(queues[name])
    integrate(until)
    return Result(busy, until - warmup, max_in_flight, max_wait, first_start, shared)


def ideal_shares(global_max: int, specs: list[QueueSpec], used: dict[str, float] | None = None) -> dict[str, Fraction]:
    """Each continuously loaded queue's long-run average running count: its floor plus its
    water-filled share of the overflow, where a rate-limited queue can use at most
    rate x duration (or, if `used` names it, what it was measured to use) and an empty queue nothing."""
    use_cap: dict[str, Fraction] = {}
    for s in specs:
        if used is not None and s.rate is not None and s.name in used:
            use_cap[s.name] = Fraction(used[s.name])
        elif not s.loaded:
            use_cap[s.name] = Fraction(0)
        elif s.rate is not None:
            use_cap[s.name] = Fraction(s.rate) * Fraction(s.duration)
        else:
            use_cap[s.name] = Fraction(global_max)
    floors = {s.name: min(Fraction(s.min_workers), use_cap[s.name]) for s in specs}
    overflow_caps = {s.name: max(Fraction(0), use_cap[s.name] - s.min_workers) for s in specs}
    pool = Fraction(global_max - sum(s.min_workers for s in specs))
    shares = water_fill(pool, {s.name: s.weight for s in specs}, overflow_caps)
    return {s.name: floors[s.name] + shares[s.name] for s in specs}
