"""The worker against its own SQL floor, on the same jobs, alternated (issue 26).

    python bench/floor.py                       # 50,000 no-op jobs, 3 repetitions of each, alternated
    python bench/floor.py --jobs 20000 --reps 5 --connections 2 --batch 50

Each repetition enqueues N ``noop`` jobs (COPY) into an emptied, vacuumed ``awa_job`` and drains
them twice in turn, in alternating order (floor first on odd repetitions, worker first on even):

- **floor**: the project's own ``claim_jobs`` and ``complete_jobs`` statements, with nothing else
  around them: ``--connections`` threads, each on its own psycopg connection (autocommit, prepared
  statements, as the worker's pool connections are), claiming ``--batch`` jobs at a time with the
  lane cursors kept as a dispatcher keeps them (``awa_django.worker.lanes.LaneCursors``, one for the
  queue, shared by the threads under a lock), and writing each batch's completions in the same
  pipelined round trip as the next claim (what the worker's writer does when it hands permits
  over). No handler, no asyncio, no Django on the path.
- **worker**: ``manage.py awa_worker -q bench`` with the defaults, until every job is completed.

Both rates are N over the database's own span, from the first claim (``min(attempted_at)``) to the
last completion (``max(finalized_at)``): no process start-up, no polling delay in it. The worker's
rate including its start-up (spawn to the last completion) is printed beside it, and its CPU time
per job from 10 % of the jobs completed to the end (``/proc``): steadier than a rate on a busy
machine. ``--via SCRIPT`` starts the worker as ``python SCRIPT manage.py awa_worker ...``.
``--against DIR`` also drains with another checkout's worker (e.g. a ``git worktree`` of an older
commit) in each repetition, the three runs in rotating order, and prints both workers' medians and
the median of their paired CPU-per-job ratios. Give both the same server with DATABASE_URL: each
checkout's embedded server is its own.

The database is ``awa_bench_floor`` on the embedded server (or DATABASE_URL's server). The machine
is shared: read the medians and the median of the paired ratios, not a single repetition.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "awa_bench_floor"
QUEUE = "bench"
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_floor_worker.log"


def setup(db_name: str = DB_NAME) -> None:
    """Create (once) and migrate the bench's database; this process then uses it."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["AWA_DB_NAME"] = db_name
    import psycopg

    from bench.mvcc import conninfo
    from testproject import settings

    admin = dict(settings.DATABASES["default"])
    with psycopg.connect(**conninfo(admin, "postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db_name]).fetchone():
            conn.execute(f"CREATE DATABASE {db_name}")  # a constant of a bench module
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def connect() -> Any:
    import psycopg
    from django.conf import settings

    from bench.mvcc import conninfo

    return psycopg.connect(**conninfo(settings.DATABASES["default"]), autocommit=True)


def fill(n: int, kind: str = "noop", args: dict[str, Any] | None = None) -> None:
    """An empty, vacuumed awa_job with n available jobs of ``kind`` (``args`` each) in the bench queue."""
    from awa_django.models import Job

    spec = {"kind": kind, "queue": QUEUE, **({"args": args} if args else {})}
    with connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done")
        conn.execute("VACUUM ANALYZE awa_job")
    batch = 10_000
    for start in range(0, n, batch):
        Job.objects.enqueue_many([dict(spec) for _ in range(min(batch, n - start))])
    with connect() as conn:
        conn.execute("VACUUM ANALYZE awa_job")


def span_seconds(n: int) -> float:
    """The database's span from the first claim to the last completion, after checking that every
    one of the n jobs completed exactly once (attempt 1)."""
    with connect() as conn:
        done, once, span = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE attempt = 1), "
            "extract(epoch FROM max(finalized_at) - min(attempted_at)) FROM awa_job_all"
        ).fetchone()
    if done != n or once != n:
        raise SystemExit(f"expected {n} jobs completed once, found {done} completed and {once} with attempt 1")
    return float(span)


def span_rate(n: int) -> float:
    """n over ``span_seconds``."""
    return n / span_seconds(n)


def floor_once(n: int, connections: int, batch: int) -> float:
    """Drain the n jobs with claim_jobs + complete_jobs alone; the span rate."""
    from awa_django.context import ClaimedJob, claimed_job_row
    from awa_django.sql import statements
    from awa_django.worker.lanes import LaneCursors

    claim, complete = statements["claim_jobs"], statements["complete_jobs"]
    lanes = LaneCursors()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def params() -> dict[str, Any]:
        with lock:
            return {"queue": QUEUE, "limit": batch, "deadline": None, "worker": "floor:0", **lanes.params()}

    def advance(rows: list[ClaimedJob], sent: dict[str, Any]) -> None:
        with lock:
            lanes.advance(rows, sent)

    def drain() -> None:
        from psycopg.rows import namedtuple_row

        try:
            with connect() as conn:
                conn.row_factory = namedtuple_row  # the lane cursors read rows by column name
                sent = params()
                # Rows decoded as the worker decodes them (the lane cursors read them by name).
                rows = conn.cursor(row_factory=claimed_job_row).execute(claim, sent, prepare=True).fetchall()
                advance(rows, sent)
                while rows:
                    sent = params()
                    with conn.pipeline():
                        done = conn.execute(
                            complete,
                            {"ids": [r.id for r in rows], "leases": [r.run_lease for r in rows]},
                            prepare=True,
                        )
                        claimed = conn.cursor(row_factory=claimed_job_row).execute(claim, sent, prepare=True)
                    if len(done.fetchall()) != len(rows):
                        raise RuntimeError("a completion was refused by the run_lease guard")
                    rows = claimed.fetchall()
                    advance(rows, sent)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=drain, name=f"floor-{i}") for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return span_rate(n)


def updates(conn: Any) -> int:
    # A claim updates the hot row, a completion deletes it (migration 0023 moves it to awa_job_done).
    (count,) = conn.execute(
        "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'awa_job'"
    ).fetchone()
    return int(count)


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds() -> float:
    """The user + system CPU time of every process on this machine whose command line is a
    PostgreSQL server's (the postmaster and its backends, walwriter, checkpointer...): the
    server's side of a drain when it runs here, as the embedded one does. Processes that ended
    between two readings take their time with them: read it across a steady stretch."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if command.startswith(b"postgres") or b"/bin/postgres" in command.split(b"\0", 1)[0]:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def worker_once(
    n: int,
    extra: list[str],
    via: str | None = None,
    queues: list[str] | None = None,
    timeout: float | None = None,
    root: Path = ROOT,
) -> tuple[float, float, float]:
    """Drain the n jobs with one awa_worker: (span rate, rate from spawn to the last completion,
    the worker's CPU µs per job from 10 % of the jobs completed to the end, start-up left out).
    ``queues`` None serves the bench queue (``-q bench``), [] every configured queue; ``timeout``
    None allows max(120 s, n / 200 s); ``root`` is the checkout whose worker runs."""
    with connect() as conn:
        before = updates(conn)
    env = dict(os.environ, PYTHONPATH=str(root))  # AWA_DB_NAME: set by setup()
    served = [QUEUE] if queues is None else queues
    with open(WORKER_LOG, "ab") as log:
        spawned = time.time()
        proc = subprocess.Popen(
            [
                sys.executable,
                *([via] if via else []),
                str(root / "manage.py"),
                "awa_worker",
                *[a for q in served for a in ("-q", q)],
                *extra,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + (max(120.0, n / 200) if timeout is None else timeout)
        mark: tuple[float, int] | None = None  # (CPU seconds, jobs completed) once 10 % are
        with connect() as conn:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"the worker exited with {proc.returncode}; see {WORKER_LOG}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"the worker did not drain {n} jobs in time; see {WORKER_LOG}")
                # The statistics counter (a claim and a completion per job) says when to count.
                moved = updates(conn) - before
                if mark is None and moved >= 0.2 * n:
                    cpu = cpu_seconds(proc.pid)
                    (done,) = conn.execute("SELECT count(*) FROM awa_job_all WHERE state = 'completed'").fetchone()
                    mark = (cpu, int(done))
                if moved >= 2 * n:
                    (done,) = conn.execute("SELECT count(*) FROM awa_job_all WHERE state = 'completed'").fetchone()
                    if done >= n:
                        break
                time.sleep(0.2)
            cpu = cpu_seconds(proc.pid)
            (last,) = conn.execute("SELECT extract(epoch FROM max(finalized_at)) FROM awa_job_all").fetchone()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert mark is not None
    per_job = (cpu - mark[0]) / max(n - mark[1], 1) * 1e6
    return span_rate(n), n / (float(last) - spawned), per_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--connections", type=int, default=2, help="floor: connections, one thread each")
    parser.add_argument("--batch", type=int, default=50, help="floor: jobs per claim")
    parser.add_argument(
        "--via",
        metavar="SCRIPT",
        help="start the worker as `python SCRIPT manage.py awa_worker ...` (a profiler or a patching wrapper)",
    )
    parser.add_argument(
        "--worker-arg", action="append", default=[], help="an extra awa_worker argument (repeat for several)"
    )
    parser.add_argument("--against", metavar="DIR", type=Path, help="also run this checkout's worker, alternated")
    args = parser.parse_args()
    setup()
    if args.against is not None:
        compare(args)
        return
    floors: list[float] = []
    workers: list[float] = []
    with_startup: list[float] = []
    ratios: list[float] = []
    cpu_per_job: list[float] = []
    for rep in range(args.reps):
        order = ("floor", "worker") if rep % 2 == 0 else ("worker", "floor")
        got: dict[str, float] = {}
        for which in order:
            fill(args.jobs)
            if which == "floor":
                got["floor"] = floor_once(args.jobs, args.connections, args.batch)
            else:
                got["worker"], startup, per_job = worker_once(args.jobs, args.worker_arg, args.via)
                with_startup.append(startup)
                cpu_per_job.append(per_job)
        floors.append(got["floor"])
        workers.append(got["worker"])
        ratios.append(got["worker"] / got["floor"])
        print(
            f"  rep {rep + 1} ({order[0]} first): floor={got['floor']:,.0f}/s worker={got['worker']:,.0f}/s "
            f"(with start-up {with_startup[-1]:,.0f}/s, {cpu_per_job[-1]:.0f} µs CPU/job) ratio={ratios[-1]:.2f}",
            file=sys.stderr,
            flush=True,
        )
    print(f"{args.jobs:,} noop jobs, {args.reps} alternated repetitions, medians:")
    print("| drain | jobs/s |")
    print("| --- | ---: |")
    print(f"| floor: claim_jobs + complete_jobs, {args.connections} connections x {args.batch} | "
          f"{statistics.median(floors):,.0f} |")  # fmt: skip
    print(f"| awa_worker (first claim to last completion) | {statistics.median(workers):,.0f} |")
    print(f"| awa_worker (from spawn) | {statistics.median(with_startup):,.0f} |")
    print(f"| awa_worker CPU per job, 10-100 % (µs) | {statistics.median(cpu_per_job):.0f} |")
    print(f"| worker ÷ floor (median of the paired ratios) | {statistics.median(ratios):.2f} |")


def compare(args: argparse.Namespace) -> None:
    """Floor, this checkout's worker and ``args.against``'s worker on the same jobs, rotated."""
    runs = ("floor", "worker", "against")
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}  # (rate, CPU µs per job)
    for rep in range(args.reps):
        order = runs[rep % 3 :] + runs[: rep % 3]
        for which in order:
            fill(args.jobs)
            if which == "floor":
                got["floor"].append((floor_once(args.jobs, args.connections, args.batch), 0.0))
            else:
                root = ROOT if which == "worker" else args.against.resolve()
                rate, _, per_job = worker_once(args.jobs, args.worker_arg, args.via, root=root)
                got[which].append((rate, per_job))
        print(
            f"  rep {rep + 1} ({order[0]} first): floor={got['floor'][-1][0]:,.0f}/s "
            f"worker={got['worker'][-1][0]:,.0f}/s ({got['worker'][-1][1]:.0f} µs) "
            f"against={got['against'][-1][0]:,.0f}/s ({got['against'][-1][1]:.0f} µs)",
            file=sys.stderr,
            flush=True,
        )
    paired = [w[1] / a[1] for w, a in zip(got["worker"], got["against"], strict=True)]
    print(f"{args.jobs:,} noop jobs, {args.reps} rotated repetitions, medians (against: {args.against}):")
    print("| drain | floor | this worker | against |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| jobs/s, first claim to last completion | {statistics.median(r for r, _ in got['floor']):,.0f} | "
          f"{statistics.median(r for r, _ in got['worker']):,.0f} | "
          f"{statistics.median(r for r, _ in got['against']):,.0f} |")  # fmt: skip
    print(f"| worker CPU per job, 10-100 % (µs) | | {statistics.median(c for _, c in got['worker']):.0f} | "
          f"{statistics.median(c for _, c in got['against']):.0f} |")  # fmt: skip
    print(f"| CPU per job, this ÷ against (median of the paired ratios) | | {statistics.median(paired):.2f} | |")


if __name__ == "__main__":
    main()
