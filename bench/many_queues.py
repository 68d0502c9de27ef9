"""Many queues holding one job each: weighted mode against hard-reserved, side by side (issue 26).

    python bench/many_queues.py                              # 1,000 queues, global 50, 3 repetitions
    python bench/many_queues.py --queues 300 --global-max 50 --reps 5

Each repetition creates ``--queues`` Queue rows (``mq0000`` ...; default limits: max_workers 50,
min_workers 0, weight 1) with one ``noop`` job each, and runs one ``awa_worker`` serving every
configured queue until all are completed, twice in turn: hard-reserved (no global maximum) and
weighted (``--global-max-workers``), in alternating order. It prints each mode's span from the
first claim to the last completion (the rows' ``attempted_at``/``finalized_at``), from spawn to the
last completion, the worker's CPU per job, and the median of the paired ratios weighted ÷ hard.

A second table times the allocator alone (``awa_django.concurrency``, no database) on the same
shape: every queue asks for its permits, the granted ones claim their one job and stand down, and
the freed permits wake ``waiting()`` queues, until every queue has run: the part of the weighted
figure that is the allocator's own work.

The database is ``awa_bench_many`` on the embedded server (or DATABASE_URL's server).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402  (the path above first)

DB_NAME = "awa_bench_many"


def fill(queues: list[str]) -> None:
    from awa_django.models import Job, Queue

    with floor.connect() as conn:
        conn.execute("TRUNCATE awa_job")
        conn.execute("DELETE FROM awa_queue WHERE name LIKE 'mq%%'")
        conn.execute("VACUUM ANALYZE awa_job")
    Queue.objects.bulk_create([Queue(name=name) for name in queues])
    Job.objects.enqueue_many([{"kind": "noop", "queue": name} for name in queues])


def allocator_once(n_queues: int, global_max: int | None) -> tuple[float, int]:
    """Seconds and allocator calls to run one job in each of n queues, the allocator alone."""
    from awa_django.concurrency import Allocator
    from awa_django.concurrency.limits import QueueLimits

    names = [f"mq{i:04d}" for i in range(n_queues)]
    clock = [0.0]
    allocator = Allocator(global_max, {name: QueueLimits() for name in names}, clock=lambda: clock[0])
    wanted = global_max if global_max is not None else QueueLimits().max_workers
    left, running, calls = set(names), [], 0
    polling = list(names)
    started = time.perf_counter()
    while left or running:
        clock[0] += 0.001
        for name in polling:
            if name not in left:
                continue
            permits = allocator.try_acquire(name, wanted)
            calls += 1
            if permits:  # claims its one job, gives the rest back, and stands down (short claim)
                running.append(permits[0])
                left.discard(name)
                for permit in permits[1:]:
                    permit.release()
                allocator.clear_demand(name)
                calls += 1
        done, running = running[:10], running[10:]  # a completion batch
        for permit in done:
            permit.release()
        polling = allocator.waiting()
        calls += 1
        if not polling and not running:
            polling = sorted(left)  # the backlog probe
    return time.perf_counter() - started, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--global-max", type=int, default=50)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one drain may take")
    parser.add_argument("--allocator-only", action="store_true", help="only the second table (no database)")
    args = parser.parse_args()
    modes = {"hard-reserved": [], "weighted": ["--global-max-workers", str(args.global_max)]}
    if not args.allocator_only:
        floor.setup(DB_NAME)
        names = [f"mq{i:04d}" for i in range(args.queues)]
        spans: dict[str, list[float]] = {mode: [] for mode in modes}
        spawned: dict[str, list[float]] = {mode: [] for mode in modes}
        cpu: dict[str, list[float]] = {mode: [] for mode in modes}
        for rep in range(args.reps):
            order = list(modes) if rep % 2 == 0 else list(modes)[::-1]
            for mode in order:
                fill(names)
                rate, from_spawn, per_job = floor.worker_once(args.queues, modes[mode], queues=[], timeout=args.timeout)
                spans[mode].append(args.queues / rate)
                spawned[mode].append(args.queues / from_spawn)
                cpu[mode].append(per_job)
                print(
                    f"  rep {rep + 1} {mode}: {spans[mode][-1]:.2f} s first claim to last completion, "
                    f"{spawned[mode][-1]:.2f} s from spawn, {per_job:.0f} µs CPU/job",
                    file=sys.stderr,
                    flush=True,
                )
        ratios = [w / h for w, h in zip(spans["weighted"], spans["hard-reserved"], strict=True)]
        print(f"{args.queues:,} queues x 1 noop job, {args.reps} alternated repetitions, medians:")
        print("| mode | first claim to last completion (s) | from spawn (s) | worker CPU per job (µs) |")
        print("| --- | ---: | ---: | ---: |")
        for mode in modes:
            label = mode if mode == "hard-reserved" else f"weighted, global {args.global_max}"
            print(
                f"| {label} | {statistics.median(spans[mode]):.2f} | {statistics.median(spawned[mode]):.2f} "
                f"| {statistics.median(cpu[mode]):.0f} |"
            )
        print(f"| weighted ÷ hard-reserved (median of the paired ratios) | {statistics.median(ratios):.2f} | | |")
    print(f"\nthe allocator alone, {args.queues:,} queues x 1 job:")
    print("| mode | seconds | allocator calls | µs per call |")
    print("| --- | ---: | ---: | ---: |")
    for mode, global_max in (("hard-reserved", None), (f"weighted, global {args.global_max}", args.global_max)):
        seconds, calls = allocator_once(args.queues, global_max)
        print(f"| {mode} | {seconds:.3f} | {calls:,} | {seconds / calls * 1e6:.0f} |")


if __name__ == "__main__":
    main()
