"""A soak with history rolling over (issue 43): steady enqueues at about half the drain rate, a
short retention so that awa_job_done's partitions are created and dropped many times, and the
workers (two by default) SIGKILLed in turn every few minutes and started again: the others serve on,
as in a rolling deploy that went wrong.

    python bench/soak.py                                  # 20 minutes, 2,000 jobs/s, 2 workers, a kill every 4 min
    python bench/soak.py --minutes 5 --rate 1000 --kill-every 90

The worker runs with COMPLETED_RETENTION 120 s (bench/soak_settings.py), so a partition is a minute
wide and dropped about three minutes after it opened. A monitor reads each minute's completions
once that minute has closed (well within the retention): their count, and pickup p50/p99 from
the rows (``attempted_at - run_at`` on the database's clock; a job rescued from a killed worker
counts its last attempt's pickup, which includes the rescue's wait). It also samples the sizes
of the hot table and of awa_job_done with its indexes, and how many range partitions exist.

At the end the producers stop, the last worker drains what is left, and the bench checks that
every enqueued job was completed exactly once (the monitor's per-minute counts sum to the jobs
enqueued) and that nothing is left waiting or running. It prints one row a minute; nothing is
asserted about time. The database is ``awa_bench_soak`` on the embedded server (or DATABASE_URL's).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "awa_bench_soak"
QUEUE = "soak"
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_soak_worker.log"


def setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.soak_settings"
    os.environ["AWA_DB_NAME"] = DB_NAME
    from bench import mvcc

    mvcc.DB_NAME = DB_NAME
    mvcc.setup()


def connect() -> Any:
    from bench import mvcc

    return mvcc.connect()


def start_worker() -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWA_DB_NAME=DB_NAME, DJANGO_SETTINGS_MODULE="bench.soak_settings")
    log = open(WORKER_LOG, "ab")  # the worker process writes it until it ends
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", QUEUE], env=env, stdout=log, stderr=log
    )


def wait_for_workers(workers: list[subprocess.Popen[bytes]], timeout: float = 120.0) -> None:
    """Until each worker process has registered itself (awa_worker_instance, by pid) and listens."""
    pids = [w.pid for w in workers]
    deadline = time.monotonic() + timeout
    with connect() as conn:
        while True:
            (up,) = conn.execute(
                "SELECT count(*) FROM awa_worker_instance WHERE pid = ANY(%s) AND (flags->>'listening')::boolean",
                [pids],
            ).fetchone()
            if up == len(pids):
                return
            dead = [w.pid for w in workers if w.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SystemExit(f"workers {dead or pids} did not come up; see {WORKER_LOG}")
            time.sleep(0.2)


def minute_row(conn: Any, minute: float) -> tuple[int, float, float]:
    """Completions finalised in [minute, minute + 60) (epoch seconds): count, pickup p50 and p99 (ms)."""
    row = conn.execute(
        """
        SELECT count(*),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at) * 1000),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at) * 1000)
        FROM awa_job_done
        WHERE state = 'completed' AND queue = %s
          AND finalized_at >= to_timestamp(%s) AND finalized_at < to_timestamp(%s)
        """,
        [QUEUE, minute, minute + 60],
    ).fetchone()
    return int(row[0]), float(row[1] or 0.0), float(row[2] or 0.0)


def around(conn: Any, moment: float, before: int = 5, after: int = 20) -> list[tuple[int, int, float, float]]:
    """Per second from ``before`` s before ``moment`` (epoch seconds, a kill) to ``after`` s after it,
    by the jobs' enqueue second (``run_at``): (offset s, jobs, pickup p50 ms, pickup p99 ms). Where a
    kill's delays come from: a step of a second or two (a new worker's start-up taking the cores)
    reads differently from a slope that lasts a heartbeat's staleness (the dead worker's jobs)."""
    rows = conn.execute(
        """
        SELECT floor(extract(epoch FROM run_at) - %(at)s)::int AS s, count(*),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at) * 1000),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at) * 1000)
        FROM awa_job_done
        WHERE state = 'completed' AND queue = %(q)s
          AND run_at >= to_timestamp(%(at)s - %(before)s) AND run_at < to_timestamp(%(at)s + %(after)s)
        GROUP BY 1 ORDER BY 1
        """,
        {"q": QUEUE, "at": moment, "before": before, "after": after},
    ).fetchall()
    return [(int(s), int(n), float(p50), float(p99)) for s, n, p50, p99 in rows]


def sizes(conn: Any) -> tuple[float, float, int]:
    """MB of the hot table (with its indexes), of awa_job_done's partitions (with theirs), and how
    many range partitions exist."""
    hot = conn.execute("SELECT pg_total_relation_size('awa_job')").fetchone()[0]
    done, parts = conn.execute(
        """
        SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0), count(*) FILTER (WHERE c.relname NOT LIKE '%%default')
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent IN ('awa_job_done_completed'::regclass, 'awa_job_done_failed'::regclass)
        """
    ).fetchone()
    return hot / 1e6, float(done) / 1e6, int(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="jobs enqueued per second (half the drain rate)")
    parser.add_argument("--kill-every", type=float, default=240.0, help="seconds between SIGKILLs of the worker")
    parser.add_argument("--batch", type=int, default=20, help="jobs per enqueue transaction")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="awa_worker processes (default 2): each kill takes the longest-running one, the others serve on",
    )
    parser.add_argument(
        "--restart-after",
        type=float,
        default=0.0,
        help="seconds from a kill to its replacement's start (default 0: at once); the per-second "
        "breakdown is then printed around each start too, to tell the kill's cost from the start-up's",
    )
    args = parser.parse_args()
    setup()
    from django.db import connection

    from awa_django.models import Job

    with connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done")
    stop = threading.Event()
    enqueued = [0]
    lock = threading.Lock()

    def produce() -> None:
        interval = args.batch / args.rate
        nxt = time.monotonic()
        try:
            while not stop.is_set():
                Job.objects.enqueue_many([{"kind": "noop", "queue": QUEUE} for _ in range(args.batch)])
                with lock:
                    enqueued[0] += args.batch
                nxt += interval
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        finally:
            connection.close()

    workers = [start_worker() for _ in range(args.workers)]
    wait_for_workers(workers)  # the first minute measures serving, not the workers' start-up
    kills = 0
    moments: list[tuple[str, float]] = []  # ("kill" or "start", epoch seconds) whose seconds to print
    producer = threading.Thread(target=produce, name="producer")
    started = time.time()
    first_minute = int(started) // 60 * 60  # the minute the run starts in (a part of it)
    producer.start()
    print(
        f"soak: {args.minutes:.0f} min at {args.rate:.0f} jobs/s, {args.workers} workers, "
        f"one SIGKILLed every {args.kill_every:.0f} s"
    )
    print("| minute | completed | jobs/s | pickup p50 (ms) | pickup p99 (ms) | hot MB | done MB | partitions | kills |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    counted = 0
    next_kill = time.monotonic() + args.kill_every
    restart_at: float | None = None  # when the killed worker's replacement starts
    minute = first_minute
    end = started + args.minutes * 60
    drained_at: float | None = None
    with connect() as conn:
        while True:
            now = time.time()
            if time.monotonic() >= next_kill and now < end:
                oldest = workers.pop(0)
                oldest.send_signal(signal.SIGKILL)
                moments.append(("kill", time.time()))
                oldest.wait()
                kills += 1
                restart_at = time.monotonic() + args.restart_after
                next_kill += args.kill_every
            if restart_at is not None and time.monotonic() >= restart_at:
                workers.append(start_worker())
                restart_at = None
                if args.restart_after:
                    moments.append(("start", time.time()))  # read around the delayed start too
            if now >= end and not stop.is_set():
                stop.set()
                producer.join()
            for what, at in [m for m in moments if now >= m[1] + 30]:  # its seconds are done: read them
                moments.remove((what, at))
                seconds = ", ".join(f"{s:+d}: {n}, {p50:.1f}/{p99:.1f}" for s, n, p50, p99 in around(conn, at))
                print(
                    f"{what} at +{at - started:.0f} s, by enqueue second (s: jobs, p50/p99 ms): {seconds}",
                    flush=True,
                )
            if now >= minute + 70:  # the minute closed 10 s ago: its completions are written
                done, p50, p99 = minute_row(conn, minute)
                counted += done
                hot, finished, parts = sizes(conn)
                print(
                    f"| {int((minute - first_minute) // 60) + 1} | {done} | {done / 60:.0f} | {p50:.1f} | {p99:.1f} "
                    f"| {hot:.0f} | {finished:.0f} | {parts} | {kills} |",
                    flush=True,
                )
                minute += 60
            if stop.is_set() and drained_at is None:
                (left,) = conn.execute("SELECT count(*) FROM awa_job WHERE queue = %s", [QUEUE]).fetchone()
                if left == 0:
                    drained_at = now
            if drained_at is not None and minute > drained_at:  # the minute it drained in is counted
                break
            time.sleep(0.5)
        (stuck,) = conn.execute("SELECT count(*) FROM awa_job WHERE queue = %s", [QUEUE]).fetchone()
        (failed,) = conn.execute(
            "SELECT count(*) FROM awa_job_all WHERE queue = %s AND state <> 'completed'", [QUEUE]
        ).fetchone()
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=60)
    total = counted
    verdict = "nothing lost" if total == enqueued[0] and stuck == 0 else "MISMATCH"
    print(
        f"enqueued={enqueued[0]} completed={total} (counted per minute, each once) not finished={stuck} "
        f"other outcomes={failed} kills={kills}: {verdict}"
    )


if __name__ == "__main__":
    main()
