"""Where a pickup's time goes: one idle worker, one job at a time, each pickup cut into its parts.

    python bench/pickup_parts.py                                   # 1,000 samples, awa_bench_pickup
    python bench/pickup_parts.py --database awa_bench_history_5m --drain 50000 --samples 1000

Starts one ``awa_worker -q bench`` through ``bench/worker_toggles.py`` with the ``trace`` toggle
(which changes nothing, only records when each NOTIFY reached the listener and when each claim was
sent, got its pool connection and came back), optionally drains ``--drain`` no-op jobs first (as
bench/history.py does before its pickups), then enqueues ``--samples`` ``stamp`` jobs one at a time
(autocommit) after a random 20-60 ms gap. Each sample, on the machine's one clock (the database's
``now()`` and the processes' ``time.time()``):

- **commit**: the enqueue call, from its start to its return (the insert and its commit's WAL flush);
- **notified**: the NOTIFY heard by the worker's listener, since the insert's ``run_at``;
- **to the claim**: the claim sent, since the NOTIFY was heard (the runner's wake-up and plan);
- **pool**: a pool connection for it;
- **claim start**: the claim's ``now()`` (``attempted_at``), since the connection was had;
- **claim executed**: psycopg's ``execute`` returned, since the claim's start (the statement, its
  own commit's flush, and the rows' arrival);
- **rows read**: ``fetchall`` (the rows made into ``ClaimedJob`` values);
- **connection back**: the connection given back to the pool;
- **to the handler**: the handler's first line (the ``stamp`` job's result), since then;
- **pickup**: the handler's first line since the enqueue returned: bench/run.py's pickup.

Prints p50 / p95 / p99 / max of each part, then the mean of each part over the slowest 1 % of
pickups against all of them: which parts the tail is made of. A pickup claimed by the writer's
hand-over (in its own round trip, not traced) or by a look before its NOTIFY was heard counts in
**commit** and **pickup** but is not cut into parts; the run says how many. The database's
``--database`` must exist and be migrated (bench/history.py's are; the default is made here).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402  (the path above first)

DB_NAME = "awa_bench_pickup"
PARTS = (
    "commit",
    "notified",
    "to the claim",
    "pool",
    "claim start",
    "claim executed",
    "rows read",
    "connection back",
    "to the handler",
    "pickup",
)


def wait_for(predicate: Any, proc: subprocess.Popen[bytes], what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise SystemExit(f"the worker exited before {what}; see {floor.WORKER_LOG}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.05)


def run_once(samples: int, drain: int, trace_out: Path, toggles: str = "") -> list[dict[str, float]]:
    from awa_django.models import Job

    def waiting(conn: Any) -> int:
        return int(
            conn.execute(
                "SELECT count(*) FROM awa_job WHERE queue = %s AND state IN ('available', 'running')", [floor.QUEUE]
            ).fetchone()[0]
        )

    env = dict(os.environ, PYTHONPATH=str(ROOT), AWA_TRACE_OUT=str(trace_out))
    env["AWA_TOGGLES"] = ",".join(["trace", *toggles.split(",")])
    with floor.connect() as conn:
        conn.execute("DELETE FROM awa_job WHERE queue = %s", [floor.QUEUE])
        with open(floor.WORKER_LOG, "ab") as log:
            command = [sys.executable, str(ROOT / "bench" / "worker_toggles.py"), str(ROOT / "manage.py")]
            proc = subprocess.Popen(
                [*command, "awa_worker", "-q", floor.QUEUE],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            for _ in range(3):  # warm-up: the worker is up and listening once these are done
                Job.objects.enqueue("noop", queue=floor.QUEUE)
            wait_for(lambda: waiting(conn) == 0, proc, "the warm-up jobs' completion", 60)
            if drain:
                Job.objects.enqueue_many([{"kind": "noop", "queue": floor.QUEUE} for _ in range(drain)])
                wait_for(lambda: waiting(conn) == 0, proc, f"the drain of {drain} jobs")
            returned: dict[int, tuple[float, float]] = {}
            for _ in range(samples):
                time.sleep(random.uniform(0.02, 0.06))
                called = time.time()
                job_id = Job.objects.enqueue("stamp", queue=floor.QUEUE).pk
                returned[job_id] = (called, time.time())
            wait_for(lambda: waiting(conn) == 0, proc, "the samples' completion", 60)
            rows = conn.execute(
                "SELECT id, extract(epoch FROM run_at), extract(epoch FROM attempted_at), result"
                " FROM awa_job_all WHERE id = ANY(%s) AND state = 'completed'",
                [list(returned)],
            ).fetchall()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    if len(rows) != samples:
        raise SystemExit(f"{samples} samples enqueued, {len(rows)} completed")
    events = [json.loads(line) for line in trace_out.read_text().splitlines()]
    heard = sorted(e[1] for e in events if e[0] == "notify" and e[2] == "awa_jobs" and e[3] == floor.QUEUE)
    claims = {job_id: e for e in events if e[0] == "claim" for job_id in e[-1]}
    got = []
    uncut = {"claimed by the writer (no claim of the runner's)": 0, "claimed before its NOTIFY was heard": 0}
    for job_id, run_at, attempted_at, started in rows:
        run_at, attempted_at, started = float(run_at), float(attempted_at), float(started)
        called, back_to_caller = returned[job_id]
        # Every sample has its enqueue call and its pickup; only those whose claim was the runner's
        # own, sent after their NOTIFY was heard, are cut into the parts between.
        sample = {"commit": back_to_caller - called, "pickup": started - back_to_caller}
        got.append(sample)
        claim = claims.get(job_id)
        if claim is None:  # the writer's hand-over claim, in its own round trip (not traced)
            uncut["claimed by the writer (no claim of the runner's)"] += 1
            continue
        _, sent, pooled, executed, fetched, back, _ = claim
        # the last NOTIFY for the queue heard before the claim went out, and after the insert began
        i = bisect.bisect_right(heard, sent) - 1
        if i < 0 or heard[i] < run_at:  # a look claimed it first
            uncut["claimed before its NOTIFY was heard"] += 1
            continue
        notified = heard[i]
        sample.update(
            {
                "notified": notified - run_at,
                "to the claim": sent - notified,
                "pool": pooled - sent,
                "claim start": attempted_at - pooled,
                "claim executed": executed - attempted_at,
                "rows read": fetched - executed,
                "connection back": back - fetched,
                "to the handler": started - back,
            }
        )
    for why, n in uncut.items():
        if n:
            print(f"({n} of {samples} pickups not cut into parts: {why}; counted in commit and pickup)")
    return [{part: seconds * 1000 for part, seconds in sample.items()} for sample in got]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def report(samples: list[dict[str, float]]) -> None:
    """Each part over the samples that have it (commit and pickup: all of them); the slowest 1 % are
    chosen among all samples by pickup."""
    print(f"{len(samples):,} pickups, ms:")
    print("| part | samples | p50 | p95 | p99 | max | mean, all | mean, slowest 1 % of pickups |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    slow = sorted(samples, key=lambda s: s["pickup"])[-max(1, len(samples) // 100) :]
    for part in PARTS:
        values = [s[part] for s in samples if part in s]
        slow_values = [s[part] for s in slow if part in s]
        if not values:
            print(f"| {part} | 0 | | | | | | |")
            continue
        slowest = f"{statistics.fmean(slow_values):.2f}" if slow_values else ""
        print(
            f"| {part} | {len(values):,} | {percentile(values, 0.5):.2f} | {percentile(values, 0.95):.2f} "
            f"| {percentile(values, 0.99):.2f} | {max(values):.2f} | {statistics.fmean(values):.2f} | {slowest} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--drain", type=int, default=0, help="no-op jobs drained before the samples")
    parser.add_argument("--database", default=DB_NAME)
    parser.add_argument("--toggles", default="", help="more of bench/worker_toggles.py's toggles, e.g. nosync")
    args = parser.parse_args()
    floor.setup(args.database)
    with tempfile.TemporaryDirectory() as tmp:
        report(run_once(args.samples, args.drain, Path(tmp) / "trace.jsonl", args.toggles))


if __name__ == "__main__":
    main()
