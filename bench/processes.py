"""``awa_worker --processes N`` against one process, on the same jobs, alternated (issue 26).

    python bench/processes.py                          # 50,000 noop, 3,000 spin of ~2 ms; 1 and 2 processes
    python bench/processes.py --noop 20000 --spin 2000 --spin-ms 2 --processes 1 2 --reps 5

Two drains per repetition and process count, the counts in rotating order:

- **noop**: ``--noop`` no-op jobs (an ``async def``): the per-job path, the SQL and the event loop;
  on a 2-core machine the second process shares the cores with the first and with PostgreSQL.
- **spin**: ``--spin`` jobs of the demo's ``spin`` kind, a plain ``def`` that makes a fixed number
  of additions in pure Python, holding the GIL throughout. The number is sized once, in this
  process, to take ``--spin-ms`` milliseconds on one core (the median of 25 timings). One process
  runs them in its thread pool, one at a time under the GIL, whatever its thread count; N
  processes can run N at once.

Each drain is ``manage.py awa_worker -q bench --processes N`` with the defaults otherwise, until
every job is completed (bench/floor.py's ``worker_once``: the rate over the rows' own span, from
the first claim to the last completion, and from spawn, which includes starting N children).
The children of ``--processes N`` start one after another, so a short drain's span from the first
claim includes time before the last child claims: the rate over the middle 80 % of completions
(10th to 90th percentile of ``finalized_at``) is printed beside it. It prints each count's medians
and the medians of the paired ratios N ÷ 1.

The database is ``awa_bench_processes`` on the embedded server (or DATABASE_URL's server).
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

DB_NAME = "awa_bench_processes"


def spin_loops(ms: float) -> int:
    """How many of the demo ``spin`` kind's additions take ``ms`` milliseconds here, on one core."""
    from testproject.demo.jobs import spin

    probe = 200_000
    timings = []
    for _ in range(25):
        started = time.perf_counter()
        spin(probe)
        timings.append(time.perf_counter() - started)
    return max(1, round(probe * ms / 1000 / statistics.median(timings)))


def middle_rate(n: int) -> float:
    """n jobs' middle 80 % over their span: 0.8 n over the time from the 10th to the 90th percentile
    of ``finalized_at``. The children of ``--processes N`` start one after another, and a drain of a
    few seconds from the first claim counts the time before the last one claims; this does not."""
    with floor.connect() as conn:
        (seconds,) = conn.execute(
            "SELECT extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY finalized_at) "
            "- percentile_disc(0.1) WITHIN GROUP (ORDER BY finalized_at)) FROM awa_job_done"
        ).fetchone()
    return 0.8 * n / float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--noop", type=int, default=50_000, help="no-op jobs per drain (0: skip)")
    parser.add_argument("--spin", type=int, default=3_000, help="CPU-bound jobs per drain (0: skip)")
    parser.add_argument("--spin-ms", type=float, default=2.0, help="each CPU-bound job's work, ms on one core")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="the counts to compare")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    floor.setup(DB_NAME)
    loops = spin_loops(args.spin_ms)
    print(f"spin: {loops:,} additions = {args.spin_ms} ms on one core here", file=sys.stderr, flush=True)
    cases = {"noop": (args.noop, {}), "spin": (args.spin, {"loops": loops})}
    cases = {kind: case for kind, case in cases.items() if case[0] > 0}
    counts = args.processes
    spans: dict[tuple[str, int], list[float]] = {(kind, n): [] for kind in cases for n in counts}
    spawned: dict[tuple[str, int], list[float]] = {(kind, n): [] for kind in cases for n in counts}
    middles: dict[tuple[str, int], list[float]] = {(kind, n): [] for kind in cases for n in counts}
    for rep in range(args.reps):
        order = counts[rep % len(counts) :] + counts[: rep % len(counts)]
        for kind, (jobs, job_args) in cases.items():
            for n in order:
                floor.fill(jobs, kind, job_args)
                rate, from_spawn, _ = floor.worker_once(jobs, ["--processes", str(n)])
                spans[kind, n].append(rate)
                spawned[kind, n].append(from_spawn)
                middles[kind, n].append(middle_rate(jobs))
                print(
                    f"  rep {rep + 1} {kind} --processes {n}: {rate:,.0f} jobs/s first claim to last "
                    f"completion, {middles[kind, n][-1]:,.0f}/s over the middle 80 %, {from_spawn:,.0f}/s from spawn",
                    file=sys.stderr,
                    flush=True,
                )
    base = counts[0]
    print(f"{args.reps} rotated repetitions, medians (spin: {loops:,} additions, {args.spin_ms} ms on one core):")
    print(
        f"| drain | --processes | jobs/s, first claim to last completion | ÷ {base} (paired) "
        f"| middle 80 % | ÷ {base} (paired) | from spawn |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, (jobs, _) in cases.items():
        for n in counts:
            paired = [r / b for r, b in zip(spans[kind, n], spans[kind, base], strict=True)]
            paired_middle = [r / b for r, b in zip(middles[kind, n], middles[kind, base], strict=True)]
            print(
                f"| {jobs:,} {kind} | {n} | {statistics.median(spans[kind, n]):,.0f} | "
                f"{statistics.median(paired):.2f} | {statistics.median(middles[kind, n]):,.0f} | "
                f"{statistics.median(paired_middle):.2f} | {statistics.median(spawned[kind, n]):,.0f} |"
            )


if __name__ == "__main__":
    main()
