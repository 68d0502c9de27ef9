"""What a claim costs the concurrency core as the configured maxima grow: no database.

    python bench/claim_costs.py [--maxima 100 10000 1000000] [--jobs 1 50] [--rounds N] [--reference]

Per global maximum (weighted mode, two queues): a dispatcher's poll as the runner makes it: ask
for every slot the global maximum allows (``Allocator.reserve``), fill ``jobs`` of them (the rows
the claim found), give the rest back, then release the jobs' permits as they end; in
microseconds per claim. ``--reference`` adds the way it was (a ``Permit`` per slot from
``try_acquire``, one release each), which took about 1.3 s per claim at 100,000; it is skipped
above 100,000 unless ``--maxima`` names only what you can wait for.

Then the cluster leader's plan (hard-reserved, one queue of ``max_workers`` = the maximum, two
workers, one of them asking for the whole queue): milliseconds per plan. Reduce before grant
handed out one slot per turn of a loop; it is computed now.

Whatever grows along a row is a cost proportional to the maximum instead of to the jobs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

from awa_django.concurrency import Allocator, QueueLimits, release_all  # noqa: E402
from awa_django.concurrency.cluster import ClusterPlanner, QueueUse, WorkerView  # noqa: E402

QUEUES = {"a": QueueLimits(min_workers=1), "b": QueueLimits(min_workers=1, weight=3)}


def claim_cost(global_max: int, jobs: int, rounds: int, *, reference: bool = False) -> float:
    """Microseconds of one claim's permits: reserve all, fill ``jobs``, give back the rest, end the jobs."""
    alloc = Allocator.weighted(global_max, QUEUES)
    alloc.on_release = lambda queue: None  # the runner's wake, coalesced per loop turn: not measured
    started = time.perf_counter()
    for _ in range(rounds):
        permits = alloc.try_acquire("a", global_max) if reference else alloc.reserve("a", global_max)
        filled = [permits[i] for i in range(min(jobs, len(permits)))]
        release_all(permits[len(filled) :])
        release_all(filled)
    elapsed = time.perf_counter() - started
    assert alloc.total_in_flight == 0
    return elapsed / rounds * 1e6


def plan_cost(max_workers: int, rounds: int) -> float:
    """Milliseconds of one cluster plan: one queue of ``max_workers``, a worker asking for all of it."""
    limits = {"a": QueueLimits(max_workers=max_workers)}
    workers = [WorkerView("w1", {"a": QueueUse(0, max_workers)}), WorkerView("w2", {"a": QueueUse(0, 0)})]
    planner = ClusterPlanner()
    started = time.perf_counter()
    for _ in range(rounds):
        plan = planner.plan(None, limits, workers, now=0.0)
    elapsed = time.perf_counter() - started
    assert sum(plan.caps[w]["a"] for w in plan.caps) == max_workers
    return elapsed / rounds * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--maxima", type=int, nargs="+", default=[100, 10_000, 1_000_000])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--reference", action="store_true", help="also time a Permit per slot (slow)")
    args = parser.parse_args()
    maxima = args.maxima
    header = "| per claim | " + " | ".join(f"max {m:,}" for m in maxima) + " |"
    print(header)
    print("|---" * (len(maxima) + 1) + "|")
    for jobs in args.jobs:
        cells = [f"{claim_cost(m, jobs, args.rounds):,.1f} us" for m in maxima]
        print(f"| reserve, {jobs} job(s) filled | " + " | ".join(cells) + " |")
        if args.reference:
            named_only = args.maxima != parser.get_default("maxima")
            cells = [
                f"{claim_cost(m, jobs, min(3, args.rounds), reference=True):,.1f} us"
                if m <= 100_000 or named_only
                else "skipped"
                for m in maxima
            ]
            print(f"| a Permit per slot, {jobs} job(s) filled | " + " | ".join(cells) + " |")
    cells = [f"{plan_cost(m, max(1, args.rounds // 10)):,.3f} ms" for m in maxima]
    print("| cluster plan, max_workers = max | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
