"""What durable jobs cost (issue 46): a step's overhead, a 3-step drain, and signal-to-resume latency.

    python bench/durable.py                      # 2,000 jobs per drain, 200 signals
    python bench/durable.py --jobs 5000 --signals 500

Three measures, on the database ``awa_bench_durable`` (embedded server, or DATABASE_URL's), with a
worker running in this process (its own loop in a thread, one queue of 10 slots):

1. **A step's overhead**, on Django's connection, outside any worker: the statements (round trips)
   and the µs of a step that runs (the first ``step`` of an attempt also reads the job's steps:
   reported apart), and of a step replayed from its record.
2. **The drain** of N ``def`` jobs doing nothing, plain, against N whose handler runs three no-op
   steps: jobs per second over the database's span (first claim to last finish), and the ratio.
3. **Signal to resume**: K jobs wait for an event; each is signalled in turn; the latency is from
   the signal's commit (the database clock read just before it) to the moment the resumed attempt
   took the event (its wait step's ``finished_at``): p50 and p99, with LISTEN on.

Short by design (the machine is shared): read the ratio and the percentiles, not one number.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.floor import connect, setup  # noqa: E402 (ROOT on the path first)

DB_NAME = "awa_bench_durable"
QUEUE = "bench-durable"


def noop(context: Any) -> None:
    return None


def three_steps(context: Any) -> None:
    for name in ("one", "two", "three"):
        context.step(name, int)


def waiter(context: Any) -> Any:
    return context.wait_for("go")


def registry() -> Any:
    from awa_django.registry import JobHandler, Registry

    found = Registry()
    for kind, func in (("bench.noop", noop), ("bench.steps", three_steps), ("bench.waiter", waiter)):
        found.register(JobHandler(kind, func, queue=QUEUE, takes_context=True))
    return found


@contextmanager
def worker() -> Any:
    import asyncio

    from awa_django.worker import QueueConfig, Worker, WorkerConfig

    config = WorkerConfig(queues={QUEUE: QueueConfig(QUEUE, max_workers=10)}, database_alias="default")
    box: dict[str, Any] = {}
    ready = threading.Event()

    def main() -> None:
        async def go() -> None:
            box["worker"] = Worker(config, registry=registry())
            waiter = asyncio.create_task(box["worker"].ready.wait())
            waiter.add_done_callback(lambda _: ready.set())
            await box["worker"].run()

        try:
            asyncio.run(go())
        finally:
            ready.set()

    thread = threading.Thread(target=main, name="bench-worker", daemon=True)
    thread.start()
    ready.wait(60)
    try:
        yield
    finally:
        box["worker"].request_stop_threadsafe()
        thread.join(60)


def empty() -> None:
    with connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done, awa_job_step, awa_job_event")
        conn.execute("VACUUM ANALYZE awa_job")


def wait_for(sql: str, params: list[Any], expected: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    with connect() as conn:
        while conn.execute(sql, params).fetchone()[0] < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {expected} rows: {sql}")
            time.sleep(0.05)


def step_overhead(n: int) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from awa_django.durable import Steps

    job_id = 9_000_000_000  # a job id no job has: the records are deleted after
    first = Steps(job_id, 1)
    with CaptureQueriesContext(connection) as read:
        first.begin("warm-up")  # the attempt's one read of its steps
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as ran:
        for i in range(n):
            first.begin(f"s{i}")
            first.record(f"s{i}", i, 0.0)
    ran_us = (time.perf_counter() - started) / n * 1e6
    replay = Steps(job_id, 2)
    replay.begin("warm-up")
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as replayed:
        for i in range(n):
            replay.begin(f"s{i}")
    replayed_us = (time.perf_counter() - started) / n * 1e6
    with connect() as conn:
        conn.execute("DELETE FROM awa_job_step WHERE job_id = %s", [job_id])
    print(f"step overhead ({n} steps): first read of an attempt's steps {len(read)} statement(s)")
    print(f"  a step that runs:     {len(ran) / n:.1f} round trip(s), {ran_us:.0f} µs")
    print(f"  a step replayed:      {len(replayed) / n:.1f} round trip(s), {replayed_us:.1f} µs")


def drain(kind: str, n: int) -> float:
    from awa_django.models import Job

    empty()
    Job.objects.enqueue_many({"kind": kind, "queue": QUEUE} for _ in range(n))
    with worker():
        wait_for("SELECT count(*) FROM awa_job_all WHERE state = 'completed'", [], n)
    with connect() as conn:
        first, last = conn.execute("SELECT min(attempted_at), max(finalized_at) FROM awa_job_all").fetchone()
    return float(n / (last - first).total_seconds())


def signal_latency(k: int) -> list[float]:
    from awa_django.models import Job

    empty()
    Job.objects.enqueue_many({"kind": "bench.waiter", "queue": QUEUE} for _ in range(k))
    latencies = []
    with worker():
        wait_for("SELECT count(*) FROM awa_job WHERE state = 'waiting'", [], k)
        with connect() as conn:
            ids = [row[0] for row in conn.execute("SELECT id FROM awa_job ORDER BY id")]
            for job_id in ids:
                sent = conn.execute("SELECT clock_timestamp()").fetchone()[0]
                Job.objects.signal(job_id, "go")
                while True:
                    taken = conn.execute(
                        "SELECT finished_at FROM awa_job_step WHERE job_id = %s AND kind = 'wait'", [job_id]
                    ).fetchone()
                    if taken is not None and taken[0] is not None:
                        break
                    time.sleep(0.001)
                latencies.append((taken[0] - sent).total_seconds() * 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--signals", type=int, default=200)
    parser.add_argument("--steps", type=int, default=500)
    options = parser.parse_args()
    setup(DB_NAME)
    step_overhead(options.steps)
    plain = drain("bench.noop", options.jobs)
    steps = drain("bench.steps", options.jobs)
    print(
        f"drain of {options.jobs} jobs: plain {plain:.0f} jobs/s, 3 steps {steps:.0f} jobs/s, ratio {steps / plain:.2f}"
    )
    latencies = signal_latency(options.signals)
    cuts = statistics.quantiles(latencies, n=100)
    print(f"signal to resume ({len(latencies)} signals, LISTEN on): p50 {cuts[49]:.1f} ms, p99 {cuts[98]:.1f} ms")


if __name__ == "__main__":
    main()
