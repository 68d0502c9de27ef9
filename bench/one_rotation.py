"""One rotation for queues and keys? Each level's integer rotation driven at the other's level.

    python bench/one_rotation.py [--keys 100 1000 3000] [--slots 50]

Both levels share one water-fill (``awa_django.concurrency.waterfill``); what turns its
fractional shares into whole slots differs: the overflow pool rotates a remainder by a credit
ledger on held time (``OverflowPool``), fair keys pick each free slot by virtual-time tags on
slot-seconds (``KeyShares``). Here both rotations run the same discrete-event drain on a virtual
clock (no database, no worker): every contender backlogged, each free slot granted as the worker
grants it (the pool: ``waiting()`` then ``try_acquire``; keys: ``pick(1)``), attempts ending after
a run time drawn per job.

* **Queue scenarios** (the edge cases of bench/fairness.py, floors left out): each contender's
  average running count against its water-fill share (the largest relative error), and how many
  slot grants a weight-1 newcomer waited beside a weight-10 flood.
* **Key scenarios** (K tenants whose jobs interleave in the table, key i's at ids i, i + K, ...):
  CPU per end and grant; the median id gap between consecutive grants (one claim's rows sharing
  heap pages is most of a keyed claim's database cost, bench/README.md); the spread of grants
  among equal keys; and the CPU to admit a key never seen before (the pool knows its contenders
  from its configuration: a new one is a ``reconfigure``).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

from awa_django.concurrency.keys import KeyShares  # noqa: E402
from awa_django.concurrency.pool import OverflowPool  # noqa: E402
from awa_django.concurrency.waterfill import water_fill  # noqa: E402

BACKLOG = 10**9


class Rotation(Protocol):
    def want(self, name: str, count: int, position: int, now: float) -> int: ...
    def grant(self, now: float, free: int) -> dict[str, int]: ...
    def end(self, name: str, seconds: float, now: float) -> int: ...
    def near(self, name: str, position: int) -> None: ...


class PoolRotation:
    """The queues' credit ledger, asked as the dispatchers ask it: a contender says what it could
    use (``try_acquire``), and a freed permit wakes the ones ``waiting()`` names."""

    def __init__(self, slots: int, weights: dict[str, int]) -> None:
        self.weights = dict(weights)
        self.pool = OverflowPool(slots, weights, now=0.0)
        self.wanted: dict[str, int] = {}

    def want(self, name: str, count: int, position: int, now: float) -> int:
        granted = self.pool.try_acquire(name, count, now=now)
        self.wanted[name] = count - granted
        return granted

    def grant(self, now: float, free: int) -> dict[str, int]:
        grants: dict[str, int] = {}
        for name in self.pool.waiting(now=now):
            granted = self.pool.try_acquire(name, self.wanted[name], now=now)
            if granted:
                grants[name] = granted
                self.wanted[name] -= granted
        return grants

    def end(self, name: str, seconds: float, now: float) -> int:
        self.pool.release(name, 1, now=now)  # its demand grows by the slot it gave back
        if self.wanted[name] >= BACKLOG // 2:  # a flood could use it again
            self.wanted[name] += 1
            return 0
        return self.want(name, self.wanted[name], 0, now)  # a rate-limited one says what it has tokens for

    def near(self, name: str, position: int) -> None:
        return None


class KeyRotation:
    """Fair keys' virtual-time tags: due jobs are offered, free slots picked."""

    def __init__(self, slots: int, weights: dict[str, int]) -> None:
        self.shares = KeyShares(weights=weights)

    def want(self, name: str, count: int, position: int, now: float) -> int:
        self.shares.offer(name, count, position=position)
        return 0

    def grant(self, now: float, free: int) -> dict[str, int]:
        return self.shares.pick(free)

    def end(self, name: str, seconds: float, now: float) -> int:
        self.shares.finished(name, seconds)
        return 0

    def near(self, name: str, position: int) -> None:
        self.shares.near(name, position)


ROTATIONS: dict[str, Callable[[int, dict[str, int]], Rotation]] = {
    "pool (credit ledger)": PoolRotation,
    "keys (virtual-time tags)": KeyRotation,
}


@dataclass(frozen=True)
class Spec:
    weight: int = 1
    arrives: float = 0.0  # when its backlog appears
    rate: float | None = None  # jobs per second (a token bucket of burst 1), else always backlogged


def drain(
    make: Callable[[int, dict[str, int]], Rotation],
    slots: int,
    specs: dict[str, Spec],
    run_time: Callable[[str], float],
    until: float,
) -> tuple[dict[str, float], list[tuple[str, int]], float, dict[str, int]]:
    """Returns slot-seconds per contender over the second half, the grants in order (contender,
    job id), CPU seconds spent in the rotation, and for each late contender how many grants went
    to others between its arrival and its first."""
    names = list(specs)
    head = {name: i for i, name in enumerate(names)}  # the next job's id: contenders' jobs interleave
    started = time.process_time()
    rotation = make(slots, {name: spec.weight for name, spec in specs.items()})
    cpu = time.process_time() - started
    events: list[tuple[float, int, str, float | None]] = []  # (at, seq, name, run time of an end | None)
    seq = itertools.count()
    for name, spec in specs.items():
        heapq.heappush(events, (spec.arrives, next(seq), name, None))
    tokens = dict.fromkeys(names, 0)
    running = 0
    busy = dict.fromkeys(names, 0.0)
    grants: list[tuple[str, int]] = []
    arrived: dict[str, int] = {}
    waited: dict[str, int] = {}
    now, half = 0.0, until / 2

    def start(name: str, n: int) -> None:
        nonlocal running
        if name in arrived and name not in waited:
            waited[name] = len(grants) - arrived[name]
        if specs[name].rate is not None:
            tokens[name] -= n
        for _ in range(n):
            grants.append((name, head[name]))
            head[name] += len(names)
            seconds = run_time(name)
            busy[name] += max(0.0, min(now + seconds, until) - max(now, half))
            heapq.heappush(events, (now + seconds, next(seq), name, seconds))
        running += n

    while events and events[0][0] < until:
        at, _, name, seconds = heapq.heappop(events)
        now = at
        t = time.process_time()
        if seconds is not None:  # an attempt ended
            running -= 1
            granted = rotation.end(name, seconds, now)
            cpu += time.process_time() - t
            start(name, granted)
        else:  # a contender arrives, or gets a rate token
            spec = specs[name]
            if spec.arrives > 0 and name not in arrived:
                arrived[name] = len(grants)
            if spec.rate is not None:
                heapq.heappush(events, (now + 1 / spec.rate, next(seq), name, None))
                if tokens[name] >= 1:
                    continue  # burst 1: the token it has not used yet is all it keeps
                tokens[name] = 1
            granted = rotation.want(name, 1 if spec.rate is not None else BACKLOG, head[name], now)
            cpu += time.process_time() - t
            start(name, granted)
        if running < slots:
            t = time.process_time()
            granted_now = rotation.grant(now, slots - running)
            for name, n in granted_now.items():
                rotation.near(name, head[name] + len(names) * (n - 1))
            cpu += time.process_time() - t
            for name, n in granted_now.items():
                start(name, n)
    return busy, grants, cpu, waited


def queue_scenarios(seed: int) -> None:
    """bench/fairness.py's scenarios, floors left out: the largest relative error of a contender's
    average running count against its water-fill share, and how many grants a late one waited."""
    cases = [
        ("A 3 / B 1, 20 slots, 150 ms", 20, {"a": Spec(3), "b": Spec(1)}, 0.15),
        ("A 10 / B 1 arriving at 5 s, 10 slots, 100 ms", 10, {"a": Spec(10), "b": Spec(1, arrives=5.0)}, 0.1),
        ("five equal, 4 slots, 100 ms", 4, {q: Spec() for q in "abcde"}, 0.1),
        ("B beside A at 2 jobs/s, 10 slots, 100 ms", 10, {"a": Spec(rate=2.0), "b": Spec()}, 0.1),
        ("1 / 2 / 5, 7 slots, 50-150 ms", 7, {"a": Spec(1), "b": Spec(2), "c": Spec(5)}, None),
    ]
    print("| queue scenario | rotation | worst error vs water-fill | late one waited (grants) |")
    print("| --- | --- | ---: | ---: |")
    until = 60.0
    for label, slots, specs, job in cases:
        caps = {n: Fraction(s.rate) * Fraction(job or 0.1) if s.rate else None for n, s in specs.items()}
        ideal = water_fill(Fraction(slots), {n: s.weight for n, s in specs.items()}, caps)
        for rotation, make in ROTATIONS.items():
            rng = random.Random(seed)

            def run_time(name: str, job: float | None = job, rng: random.Random = rng) -> float:
                return job if job is not None else rng.uniform(0.05, 0.15)

            busy, _, _, waited = drain(make, slots, specs, run_time, until)
            error = max(abs(busy[n] / (until / 2) / float(ideal[n]) - 1) for n in specs)
            late = ", ".join(str(n) for n in waited.values())
            print(f"| {label} | {rotation} | {error:.1%} | {late} |")


def key_scenarios(keys: list[int], slots: int, seed: int) -> None:
    """K equal tenants, jobs interleaved in the table, 40-60 ms each, about 6 K attempts."""
    print("| keys | rotation | CPU per grant and end | median id gap | admit a new key |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for count in keys:
        specs = {f"k{i}": Spec() for i in range(count)}
        until = 6 * count * 0.05 / slots
        for rotation, make in ROTATIONS.items():
            rng = random.Random(seed)

            def run_time(name: str, rng: random.Random = rng) -> float:
                return rng.uniform(0.04, 0.06)

            _, grants, cpu, _ = drain(make, slots, specs, run_time, until)
            tail = grants[len(grants) // 2 :]
            gaps = sorted(abs(b[1] - a[1]) for a, b in itertools.pairwise(tail))
            print(
                f"| {count:,} | {rotation} | {cpu / len(grants) * 1e6:.1f} us | {gaps[len(gaps) // 2]:,} | "
                f"{admit_cost(make, slots, count):.0f} us |"
            )


def admit_cost(make: Callable[[int, dict[str, int]], Rotation], slots: int, count: int) -> float:
    """CPU (microseconds) to admit a key never seen before beside ``count`` backlogged ones (mean of 20)."""
    weights = {f"k{i}": 1 for i in range(count)}
    rotation = make(slots, weights)
    for i, name in enumerate(weights):
        rotation.want(name, BACKLOG, i, 0.0)
    started = time.process_time()
    for i in range(20):
        name = f"new{i}"
        if isinstance(rotation, PoolRotation):  # the pool's contenders are its configuration
            rotation.weights[name] = 1
            rotation.pool.reconfigure(slots, rotation.weights, now=0.0)
        rotation.want(name, BACKLOG, count + i, 0.0)
    return (time.process_time() - started) / 20 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--slots", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    queue_scenarios(args.seed)
    print()
    key_scenarios(args.keys, args.slots, args.seed)


if __name__ == "__main__":
    main()
