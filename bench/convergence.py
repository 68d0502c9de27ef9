"""How soon the weighted split moves, on the clock: the timings the tests count in job ends.

    python bench/convergence.py            # 5 repetitions of each
    python bench/convergence.py --reps 11

Two measurements, each on a fresh in-process worker (A min 2 weight 3, B min 2 weight 1, global
maximum 24, 150 ms jobs: the ideal split is 17:7), printed as one table (median, min, max):

* **newcomer**: A is loaded alone and runs 22 (its floor and the whole pool); B is loaded. From
  B's enqueue commit to the first sample with B running its share of 7
  (``tests/weighted/test_fairness.py`` asserts it in A's job ends instead).
* **reconfigure**: both loaded and running 17:7; B's weight is saved as 3 through the ORM. From
  the save's commit to the first sample within 1 of 12:12, with the fallback re-read off (only
  the save's NOTIFY can bring the change; ``tests/weighted/test_reconfigure.py``) and at its
  default of 1 s.

The spec bounds both at 2 s. Concurrency is read from the
database (``state='running'`` rows per queue, sampled every ~15 ms, ``bench/fairness.py``'s
sampler); a sample's time is taken after its count returned, so a time measured up to it is
never shorter than the true one. The database is ``bench/fairness.py``'s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

from bench.fairness import Sample, Sampler, Scenario, Spec, _clean, _enqueue, _setup_django, _start_worker  # noqa: E402

JOB_MS = 150
SCENARIO = Scenario(
    "A 3 / B 1, min 2 each, G=24, 150 ms",
    24,
    (Spec("conv_a", 0, weight=3, min_workers=2), Spec("conv_b", 0, min_workers=2)),
    {"conv_a": 17, "conv_b": 7},
    job_ms=JOB_MS,
)
A, B = "conv_a", "conv_b"


def newcomer() -> float:
    """Seconds from B's commit to B running 7."""
    _clean([A, B])
    sampler = Sampler([A, B])
    sampler.start()
    worker, thread, box = _start_worker(SCENARIO)
    try:
        _enqueue(A, 900, JOB_MS)
        sampler.wait_for(lambda s: s.running[A] == 22, "A to hold its floor and the whole pool")
        committed = _enqueue(B, 200, JOB_MS)
        reached = sampler.wait_for(lambda s: s.running[B] >= 7, "B to run its share of 7")
    finally:
        sampler.halt.set()
        sampler.join(10)
        worker.request_stop_threadsafe()
        thread.join(30)
        _clean([A, B])
    if "error" in box:
        raise box["error"]
    return reached.t - committed


def reconfigure(reconfigure_interval: float) -> float:
    """Seconds from the weight's save to the first even split."""
    from awa_django.models import Queue

    _clean([A, B])
    sampler = Sampler([A, B])
    sampler.start()
    worker, thread, box = _start_worker(SCENARIO, reconfigure_interval=reconfigure_interval)
    try:
        _enqueue(A, 900, JOB_MS)
        _enqueue(B, 800, JOB_MS)
        sampler.wait_for(lambda s: s.running[A] == 17 and s.running[B] == 7, "a 17:7 split")
        Queue.objects.filter(name=B).update(weight=3)  # autocommit: committed on return
        saved = time.monotonic()

        def even(s: Sample) -> bool:
            return abs(s.running[A] - 12) <= 1 and abs(s.running[B] - 12) <= 1

        reached = sampler.wait_for(even, "an even split after B's weight went to 3")
    finally:
        sampler.halt.set()
        sampler.join(10)
        worker.request_stop_threadsafe()
        thread.join(30)
        _clean([A, B])
    if "error" in box:
        raise box["error"]
    return reached.t - saved


def _row(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return f"| {name} | {len(ms)} | {statistics.median(ms):.0f} ms | {min(ms):.0f} ms | {max(ms):.0f} ms |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each measurement (default 5)")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    _setup_django()
    joined: list[float] = []
    notified: list[float] = []
    fallback: list[float] = []
    for _ in range(args.reps):  # interleaved, so a drift of the machine's load spreads over all rows
        joined.append(newcomer())
        notified.append(reconfigure(3600.0))
        fallback.append(reconfigure(1.0))
    print("| measurement | reps | median | min | max |")
    print("|---|---:|---:|---:|---:|")
    print(_row("newcomer B: commit → running its share of 7", joined))
    print(_row("weight saved → even split, NOTIFY only (re-read off)", notified))
    print(_row("weight saved → even split, re-read every 1 s as well", fallback))
    return 0


if __name__ == "__main__":
    sys.exit(main())
