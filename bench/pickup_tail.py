"""What makes the pickup tail: one idle worker, one job at a time, with parts of its loop toggled.

    python bench/pickup_tail.py                                  # 300 samples per configuration
    python bench/pickup_tail.py --samples 500 --configs ",nolook,nogc,nolook,nogc" --reps 2

Each configuration (``AWA_TOGGLES`` of ``bench/worker_toggles.py``; the empty one is the worker as
it is) starts one ``awa_worker -q bench`` through that wrapper, warms it with 3 jobs, then
enqueues one ``noop`` job at a time (autocommit) after a random 20-60 ms gap, and reads each
job's pickup from its row: ``attempted_at - run_at``, both the database's clock (the claim's
``now()`` minus the insert's): NOTIFY delivery, the wake-up and the claim round trip, without the
handler. Configurations alternate within each repetition; p50/p95/p99 are over all samples of a
configuration. The configurations are separated by ``/`` (``--configs "/nolook/nogc"``).

``--to handler`` measures to the handler's start instead: ``stamp`` jobs, which return the worker's
``time.time()`` as they run, minus this process's ``time.time()`` once the enqueue returned (one
machine, one clock), as bench/run.py's pickup does. That includes what the database's clock leaves
out: the claim statement's own planning and execution, and the attempt's start.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402  (the path above first)

DB_NAME = "awa_bench_pickup"


def run_once(toggles: str, samples: int, to: str = "claim") -> list[float]:
    from awa_django.models import Job

    with floor.connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done")
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWA_TOGGLES=toggles)
    with open(floor.WORKER_LOG, "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "worker_toggles.py"),
                str(ROOT / "manage.py"),
                "awa_worker",
                "-q",
                floor.QUEUE,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        with floor.connect() as conn:
            for _ in range(3):  # warm-up: the worker is up and listening once these are done
                Job.objects.enqueue("noop", queue=floor.QUEUE)
            deadline = time.monotonic() + 60
            while conn.execute("SELECT count(*) FROM awa_job_all WHERE state = 'completed'").fetchone()[0] < 3:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"the worker did not start; see {floor.WORKER_LOG}")
                time.sleep(0.05)
            conn.execute("TRUNCATE awa_job, awa_job_done")
            committed: dict[int, float] = {}
            for _ in range(samples):
                time.sleep(random.uniform(0.02, 0.06))
                if to == "handler":
                    job = Job.objects.enqueue("stamp", queue=floor.QUEUE)
                    committed[job.pk] = time.time()
                else:
                    Job.objects.enqueue("noop", queue=floor.QUEUE)
            deadline = time.monotonic() + 60
            while conn.execute("SELECT count(*) FROM awa_job WHERE attempted_at IS NULL").fetchone()[0]:
                if time.monotonic() > deadline:
                    raise SystemExit("jobs left unclaimed")
                time.sleep(0.05)
            if to == "handler":
                while conn.execute("SELECT count(*) FROM awa_job WHERE state <> 'completed'").fetchone()[0]:
                    if time.monotonic() > deadline:
                        raise SystemExit("jobs left unfinished")
                    time.sleep(0.05)
                stamped = conn.execute("SELECT id, result FROM awa_job_all WHERE state = 'completed'").fetchall()
                return [(float(result) - committed[job_id]) * 1000 for job_id, result in stamped]
            rows = conn.execute("SELECT extract(epoch FROM attempted_at - run_at) * 1000 FROM awa_job_all").fetchall()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return [float(ms) for (ms,) in rows]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--configs", default="/nolook/nogc/nolook,nogc")
    parser.add_argument(
        "--to", choices=("claim", "handler"), default="claim", help="claim: the claim's now(); handler: its start"
    )
    args = parser.parse_args()
    floor.setup(DB_NAME)
    configs = args.configs.split("/")
    got: dict[str, list[float]] = {config: [] for config in configs}
    for rep in range(args.reps):
        for config in configs if rep % 2 == 0 else configs[::-1]:
            got[config] += run_once(config, args.samples, args.to)
            values = got[config]
            print(f"  rep {rep + 1} [{config or 'as is'}] p50 {percentile(values, 0.5):.2f} ms", file=sys.stderr)
    measured = "claim now() - run_at" if args.to == "claim" else "the handler's time.time() - the enqueue's return"
    print(f"pickup ({measured}), {args.samples} samples x {args.reps} repetitions per configuration:")
    print("| worker | p50 ms | p95 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for config, values in got.items():
        print(
            f"| {config or 'as is'} | {percentile(values, 0.5):.2f} | {percentile(values, 0.95):.2f} "
            f"| {percentile(values, 0.99):.2f} | {max(values):.2f} |"
        )


if __name__ == "__main__":
    main()
