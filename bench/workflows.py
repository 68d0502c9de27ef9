"""Workflows side by side with plain jobs, on one running worker (issue 25).

    python bench/workflows.py                      # the issue's sizes: N = 10,000, a 1,000-step chain, 200 waits
    python bench/workflows.py --n 2000 --chain 200 --waits 100 --reps 5   # a quicker look

One ``manage.py awa_worker -q bench`` runs throughout; each repetition measures, in turn:

- **enqueue**: ``Job.objects.enqueue_many`` of N plain ``noop`` jobs, then a 1 -> N -> 1 fan-out /
  fan-in ``Workflow`` (N + 2 jobs, 2N edges), each in its own transaction; wall time of the call.
- **drain**: each batch's rate over the database's span, first claim (``min(attempted_at)``) to
  last completion (``max(finalized_at)``), plain jobs and the fan-out alike (the worker is already
  up: no start-up in it).
- **fan_snapshot** (``--snapshot``): the fan-out again, with a second connection holding a
  REPEATABLE READ snapshot from before its enqueue to the end of its drain (bench/mvcc.py's).
- **chain**: a chain of M ``stamp`` steps (each returns the worker's clock as it ran); per step,
  the next step's stamp minus this one's: from one handler's return to the next one's start,
  by the one worker's clock, p50 and p99. (Until 2026-12-01 this read the next step's
  ``attempted_at`` minus this one's ``finalized_at``, which leaves out the writer's wait and the
  handler's start, and reads 0 once the next step is claimed in the completing transaction.)
- **wait**: a ``noop`` job enqueued, then ``job.wait()``; the wall time at which wait returned
  minus the job's ``finalized_at`` (the completing transaction's now(), so the figure includes
  the commit): p50 and p99.

The database is ``awa_bench_workflows`` on the embedded server (or DATABASE_URL's). The machine
is shared: read the medians, and the ratios measured back to back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.floor import ROOT, connect, setup

DB_NAME = "awa_bench_workflows"
QUEUE = "bench"
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_workflows_worker.log"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def reset() -> None:
    with connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done, awa_job_edge, awa_workflow")
        conn.execute("VACUUM ANALYZE awa_job")
        conn.execute("VACUUM ANALYZE awa_job_edge")


def wait_done(ids_sql: str, params: dict[str, Any], count: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    with connect() as conn:
        while True:
            (done,) = conn.execute(
                f"SELECT count(*) FROM awa_job_all WHERE state = 'completed' AND {ids_sql}",
                params,
            ).fetchone()
            if done >= count:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"only {done} of {count} jobs completed in {timeout} s; see {WORKER_LOG}")
            time.sleep(0.05)


def span_rate(ids_sql: str, params: dict[str, Any]) -> float:
    with connect() as conn:
        n, span = conn.execute(
            "SELECT count(*), extract(epoch FROM max(finalized_at) - min(attempted_at)) "
            f"FROM awa_job_all WHERE {ids_sql}",
            params,
        ).fetchone()
    return n / float(span)


def plain(n: int) -> tuple[float, float]:
    from django.db import transaction

    from awa_django.models import Job

    reset()
    started = time.perf_counter()
    with transaction.atomic():
        Job.objects.enqueue_many({"kind": "noop", "queue": QUEUE} for _ in range(n))
    enqueue = time.perf_counter() - started
    wait_done("true", {}, n)
    return enqueue, span_rate("true", {})


class OldSnapshot:
    """A second connection holding one REPEATABLE READ snapshot taken now, until closed (as
    bench/mvcc.py's): vacuum and pruning keep every row version made meanwhile."""

    def __init__(self) -> None:
        self.conn = connect()
        self.conn.autocommit = False
        self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT count(*) FROM awa_job").fetchone()

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()


def fan_snapshot(n: int) -> tuple[float, float]:
    """``fan`` with an old snapshot held from before its enqueue to the end of its drain."""
    reset()
    snapshot = OldSnapshot()
    try:
        return fan(n, fresh=False)
    finally:
        snapshot.close()


def fan(n: int, fresh: bool = True) -> tuple[float, float]:
    from django.db import transaction

    from awa_django.workflows import Workflow

    if fresh:
        reset()
    started = time.perf_counter()
    with transaction.atomic():
        wf = Workflow("fan")
        head = wf.add("noop", queue=QUEUE, name="head")
        parts = [wf.add("noop", queue=QUEUE, after=[head], name="part") for _ in range(n)]
        wf.add("noop", queue=QUEUE, after=parts, name="tail")
        wf.enqueue()
    enqueue = time.perf_counter() - started
    where = "workflow_id = %(w)s"
    wait_done(where, {"w": wf.id}, n + 2)
    return enqueue, span_rate(where, {"w": wf.id})


def chain_gaps(m: int) -> list[float]:
    """A chain of ``m`` ``stamp`` steps: each returns the worker's clock as it ran, so step n+1's
    stamp minus step n's is what the chain adds between two steps: writing n's end and releasing
    n+1, claiming it, and starting its handler (both stamps taken by the one worker process)."""
    from awa_django.workflows import Workflow

    reset()
    wf = Workflow("chain")
    previous = None
    for _ in range(m):
        previous = wf.add("stamp", queue=QUEUE, after=[] if previous is None else [previous])
    wf.enqueue()
    wait_done("workflow_id = %(w)s", {"w": wf.id}, m)
    with connect() as conn:
        rows = conn.execute(
            "SELECT (result #>> '{}')::float8 FROM awa_job_all WHERE workflow_id = %(w)s ORDER BY id", {"w": wf.id}
        ).fetchall()
    return [rows[i + 1][0] - rows[i][0] for i in range(len(rows) - 1)]


def wait_latencies(k: int) -> list[float]:
    from awa_django.models import Job

    reset()
    latencies = []
    for _ in range(k):
        job = Job.objects.enqueue("noop", queue=QUEUE)
        job.wait(timeout=30)
        returned = datetime.now(timezone.utc)
        with connect() as conn:
            (finalized,) = conn.execute("SELECT finalized_at FROM awa_job_all WHERE id = %s", [job.pk]).fetchone()
        latencies.append((returned - finalized).total_seconds())
    return latencies


def wait_for_worker(timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with connect() as conn:
        while not conn.execute("SELECT 1 FROM awa_worker_instance").fetchone():
            if time.monotonic() > deadline:
                raise SystemExit(f"no worker came up in {timeout} s; see {WORKER_LOG}")
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="fan-out width and plain batch size")
    parser.add_argument("--chain", type=int, default=1000, help="chain length")
    parser.add_argument("--waits", type=int, default=200, help="wait() calls")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="also drain the fan-out with an old snapshot held (docs/storage.md)",
    )
    args = parser.parse_args()
    setup(DB_NAME)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(WORKER_LOG, "ab") as log:
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", QUEUE],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    figures: dict[str, list[float]] = {}
    try:
        wait_for_worker()  # nothing is measured across its start-up
        for rep in range(args.reps):
            runs = [("plain", plain), ("fan", fan)] if rep % 2 == 0 else [("fan", fan), ("plain", plain)]
            if args.snapshot:
                runs.insert(1 + rep % 2, ("fan_snapshot", fan_snapshot))
            for label, run in runs:
                enqueue, rate = run(args.n)
                figures.setdefault(f"{label}_enqueue_s", []).append(enqueue)
                figures.setdefault(f"{label}_drain_per_s", []).append(rate)
            gaps = chain_gaps(args.chain)
            figures.setdefault("chain_gap_p50_ms", []).append(1000 * percentile(gaps, 0.5))
            figures.setdefault("chain_gap_p99_ms", []).append(1000 * percentile(gaps, 0.99))
            waits = wait_latencies(args.waits)
            figures.setdefault("wait_p50_ms", []).append(1000 * percentile(waits, 0.5))
            figures.setdefault("wait_p99_ms", []).append(1000 * percentile(waits, 0.99))
            this = ", ".join(f"{key} {values[-1]:.4g}" for key, values in figures.items())
            print(f"repetition {rep + 1}/{args.reps}: {this}", flush=True)
    finally:
        worker.terminate()
        worker.wait(60)
    med = {key: statistics.median(values) for key, values in figures.items()}
    print(f"\nN={args.n}, chain={args.chain}, waits={args.waits}, reps={args.reps} (medians)\n")
    print("| figure | value |\n|---|---|")
    for key, value in med.items():
        print(f"| {key} | {value:.4g} |")
    print(f"| fan/plain enqueue time | {med['fan_enqueue_s'] / med['plain_enqueue_s']:.2f}x |")
    print(f"| fan/plain drain rate | {med['fan_drain_per_s'] / med['plain_drain_per_s']:.2f}x |")
    if args.snapshot:
        print(f"| fan drain, old snapshot / none | {med['fan_snapshot_drain_per_s'] / med['fan_drain_per_s']:.2f}x |")


if __name__ == "__main__":
    main()
