"""The measurements, written once against the adapter interface (bench/systems/base.py).

Each function takes a System (on a fresh database made from the system's template) and the
parameters the runner chose, and returns a dict of figures; the runner takes the median of
each figure over the repetitions. All times are time.time() / perf_counter() on this one
machine, in the enqueuer and the workers alike.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench import handlerlog
from bench.systems.base import System, WorkerGroup

POLL = 0.02  # seconds between completion polls (the drain end is known to within this)


def _wait_completed(system: System, workers: WorkerGroup, target: int, timeout: float) -> float:
    """Poll the system's own completed count until it reaches ``target``; return that moment."""
    deadline = time.time() + timeout
    last = -1
    while True:
        done = system.count_completed()
        now = time.time()
        if done >= target:
            return now
        if now > deadline:
            raise TimeoutError(
                f"{done}/{target} jobs completed after {timeout:.0f}s ({system.count_unfinished()} unfinished)"
            )
        if done == last:
            workers.check_alive()
        last = done
        time.sleep(POLL)


class _HandlerEnds:
    """Counts the handler end lines of a drain by reading the handler log from where it stopped.

    The old-snapshot drains wait here before polling the system's completed count: a file read
    costs the two shared cores nothing, whereas counting a job table full of dead row versions
    every 20 ms for the whole drain would compete with the workers (more so with the snapshot
    held, which is the very thing measured). The count polls then run only over the last stretch
    between a handler's end and the system recording it.
    """

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.offset = 0
        self.ends = 0

    def wait(self, workers: WorkerGroup, target: int, deadline: float) -> None:
        last = -1
        while self.ends < target:
            events, self.offset = handlerlog.read(str(self.log_path), self.offset)
            self.ends += sum(1 for ev, *_ in events if ev == "E")
            if self.ends >= target:
                return
            if time.time() > deadline:
                raise TimeoutError(
                    f"{self.ends}/{target} handlers ended {time.time() - workers.started_at:.0f}s after the "
                    f"worker started ({self.ends / (time.time() - workers.started_at):.0f} jobs/s, start-up included)"
                )
            if self.ends == last:
                workers.check_alive()
            last = self.ends
            time.sleep(POLL)


def _left(deadline: float) -> float:
    """Seconds to a deadline, at least a few: the last stretch is always given a chance."""
    return max(5.0, deadline - time.time())


class OldSnapshot:
    """A second connection holding one old snapshot on the system's database until closed.

    ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM <job table>`` (issue 16): the
    snapshot is taken by the first read and kept for the whole transaction, so vacuum cannot
    remove any row version deleted after it, the dead versions every claim and completion leave.
    """

    def __init__(self, db_url: str, table: str) -> None:
        import psycopg
        from psycopg import sql

        self.conn = psycopg.connect(db_url, autocommit=True)
        try:
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(*table.split(".")))
            row = self.conn.execute(query).fetchone()
            self.rows_seen = int(row[0]) if row else 0
            self.pid = self.conn.info.backend_pid
        except BaseException:
            self.conn.close()
            raise

    def xmin_age(self, system: System) -> int | None:
        """Transactions since the held snapshot's xmin, seen from the harness's connection; None
        if the backend holds no snapshot (then nothing was held back)."""
        age = system.scalar("SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = %s", [self.pid])
        return None if age is None else int(age)

    def close(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        finally:
            self.conn.close()


def _dead_tuples(system: System, table: str) -> int | None:
    """The table's dead row versions as the statistics last reported them (None for a view)."""
    schema, _, name = table.rpartition(".")
    rows = system.sql(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s AND schemaname = %s",
        [name, schema or "public"],
    )
    return int(rows[0][0]) if rows else None


def _verify_exactly_once(system: System, log_path: Path, seqs: range) -> dict[str, Any]:
    """Load the handler-start seqs into the system's database and count them there.

    ``bench_handled`` holds one row per handler execution; a job that ran twice shows up as a
    duplicate, a job that never ran as missing. The system's own completed count must match too.
    """
    events, _ = handlerlog.read(str(log_path))
    starts = [seq for ev, seq, *_ in events if ev == "S" and seq >= 0]
    system.sql("DROP TABLE IF EXISTS bench_handled")
    system.sql("CREATE TABLE bench_handled (seq bigint NOT NULL)")
    import psycopg

    with psycopg.connect(system.harness_url, autocommit=True) as conn, conn.cursor() as cur:
        with cur.copy("COPY bench_handled (seq) FROM STDIN") as copy:
            for seq in starts:
                copy.write_row((seq,))
    rows, distinct, duplicates, missing = system.sql(
        """
        SELECT (SELECT count(*) FROM bench_handled),
               (SELECT count(DISTINCT seq) FROM bench_handled),
               (SELECT count(*) FROM (SELECT seq FROM bench_handled GROUP BY seq HAVING count(*) > 1) d),
               (SELECT count(*) FROM generate_series(%s::bigint, %s::bigint) g(seq)
                 WHERE NOT EXISTS (SELECT 1 FROM bench_handled h WHERE h.seq = g.seq))
        """,
        [seqs.start, seqs.stop - 1],
    )[0]
    completed = system.count_completed()
    expected = len(seqs)
    ok = rows == expected and distinct == expected and duplicates == 0 and missing == 0 and completed == expected
    return {
        "exactly_once": ok,
        "handled_rows": rows,
        "distinct_jobs": distinct,
        "duplicated_jobs": duplicates,
        "missing_jobs": missing,
        "system_completed": completed,
    }


# ---- enqueue ------------------------------------------------------------------------------------


def single_enqueue(system: System, p: dict[str, Any]) -> dict[str, Any]:
    n = int(p["n"])
    t0 = time.perf_counter()
    system.single_enqueue(n, queue="bench")
    seconds = time.perf_counter() - t0
    stored = system.count_unfinished()
    if stored != n:
        raise RuntimeError(f"enqueued {n} jobs but the database holds {stored} waiting jobs")
    return {"jobs_per_s": n / seconds, "seconds": seconds, "n": n}


def bulk_enqueue(system: System, p: dict[str, Any]) -> dict[str, Any]:
    n = int(p["n"])
    t0 = time.perf_counter()
    system.bulk_enqueue(n, kind="noop", queue="bench")
    seconds = time.perf_counter() - t0
    stored = system.count_unfinished()
    if stored != n:
        raise RuntimeError(f"enqueued {n} jobs but the database holds {stored} waiting jobs")
    return {"jobs_per_s": n / seconds, "seconds": seconds, "n": n}


# ---- drain --------------------------------------------------------------------------------------


def drain(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """n pre-enqueued no-op jobs; workers start; rate from the first handler start to the moment the
    system's completed count reaches n. Then exactly-once is checked in the database.

    ``old_snapshot``: a second connection (OldSnapshot) takes its snapshot after the jobs are
    enqueued and before the workers start, and holds it until the drain is measured, whatever
    happens. ``quiet_poll``: wait on the handler log first and poll the completed count only once
    every handler has ended (see _HandlerEnds); the end moment is defined as without it.
    """
    n, concurrency, processes = int(p["n"]), int(p["concurrency"]), int(p["processes"])
    # Weighted drain: the same jobs with the concurrency given as a global maximum over one queue
    # (min 0, weight 1), to compare the weighted mode's overhead with the per-queue limit.
    weighted = None
    if p.get("weighted"):
        if p.get("scope") == "cluster" and not system.supports_cluster:
            from bench.systems.base import UnsupportedError

            raise UnsupportedError(system.cluster_reason)
        if not system.supports_weighted:
            from bench.systems.base import UnsupportedError

            raise UnsupportedError(system.weighted_reason)
        # Scope "cluster": one global maximum for all the processes together, as many slots as
        # process scope gives them (concurrency each), so only the coordination's cost differs.
        scope = p.get("scope", "process")
        global_max = concurrency * (processes if scope == "cluster" else 1)
        weighted = {"global_max": global_max, "queues": {"bench": {"min": 0, "weight": 1}}, "scope": scope}
    if p.get("metrics"):
        if not getattr(system, "supports_metrics", False):
            from bench.systems.base import UnsupportedError

            raise UnsupportedError(system.metrics_reason)
        system.worker_metrics = str(p["metrics"])
    system.bulk_enqueue(n, kind="noop", queue="bench")
    if system.count_unfinished() != n:
        raise RuntimeError("the pre-enqueued jobs are not all waiting")
    log_path = system.workdir / "handler.log"
    timeout = float(p.get("timeout", 600))
    ends = _HandlerEnds(log_path) if p.get("quiet_poll") else None
    snapshot = OldSnapshot(system.db_url, system.job_table) if p.get("old_snapshot") else None
    held: dict[str, Any] = {}
    try:
        workers = system.start_worker(concurrency, processes, ["bench"], log_path, weighted=weighted)
        deadline = workers.started_at + timeout
        try:
            # The workers' CPU between 10 % and 100 % completed: the steady per-job cost, start-up
            # (imports, connections) left out.
            if ends is not None:
                ends.wait(workers, n // 10, deadline)
            _wait_completed(system, workers, n // 10, timeout if ends is None else _left(deadline))
            cpu_from, done_from = workers.cpu_seconds(), system.count_completed()
            if ends is not None:
                ends.wait(workers, n, deadline)
            done_at = _wait_completed(system, workers, n, timeout if ends is None else _left(deadline))
            cpu_to = workers.cpu_seconds()
            if snapshot is not None:
                # Proof that it was held to the end: its xmin still set, this many transactions back.
                held["snapshot_xmin_age"] = snapshot.xmin_age(system)
                held["snapshot_rows_seen"] = snapshot.rows_seen
                if held["snapshot_xmin_age"] is None:
                    raise RuntimeError("the old-snapshot connection holds no snapshot at the end of the drain")
            if "old_snapshot" in p:  # the old-snapshot rows, held or not: what vacuum has left
                held["dead_tuples_end"] = _dead_tuples(system, system.job_table)
        finally:
            workers.stop()
    finally:
        if snapshot is not None:
            snapshot.close()
    events, _ = handlerlog.read(str(log_path))
    starts = [(t, pid) for ev, _s, _q, t, pid in events if ev == "S"]
    first_start = min(t for t, _pid in starts)
    first_by_pid: dict[int, float] = {}
    for t, pid in starts:
        first_by_pid[pid] = min(t, first_by_pid.get(pid, t))
    result = {
        "jobs_per_s": n / (done_at - first_start),
        "jobs_per_s_incl_startup": n / (done_at - workers.started_at),
        "seconds": done_at - first_start,
        "startup_seconds": first_start - workers.started_at,
        "n": n,
        "processes": processes,
        "concurrency_per_process": system.max_concurrency_per_process or concurrency,
        # How many processes ran jobs, and how long after the first job the last one joined
        # (worker boot skew: on a small N with several processes it weighs on jobs_per_s).
        "processes_seen": len(first_by_pid),
        "all_started_seconds": max(first_by_pid.values()) - first_start,
    }
    result.update(held)
    if snapshot is not None:
        result["old_snapshot"] = True
    if cpu_from is not None and cpu_to is not None and n > done_from:
        result["worker_cpu_us_per_job"] = (cpu_to - cpu_from) / (n - done_from) * 1e6
    result.update(_verify_exactly_once(system, log_path, range(n)))
    if not result["exactly_once"]:
        raise RuntimeError(f"exactly-once check failed: {result}")
    return result


# ---- pickup latency -----------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Idle worker; one job at a time: the enqueuer's time.time() right after the committing call
    returns, to the handler's time.time() as it starts. ``finished_rows`` first fills the job table
    with that many finished jobs (the scale variant)."""
    samples, finished = int(p["samples"]), int(p.get("finished_rows", 0))
    result: dict[str, Any] = {}
    if finished:
        t0 = time.perf_counter()
        system.add_finished_rows(finished)
        result["finished_rows"] = finished
        result["prepare_seconds"] = time.perf_counter() - t0
    log_path = system.workdir / "handler.log"
    workers = system.start_worker(int(p.get("concurrency", 32)), 1, ["bench"], log_path)
    seen: dict[int, float] = {}
    offset = 0

    def wait_for(seq: int, timeout: float) -> float | None:
        nonlocal offset
        deadline = time.time() + timeout
        while seq not in seen:
            events, offset = handlerlog.read(str(log_path), offset)
            for ev, s, _q, t, _pid in events:
                if ev == "S":
                    seen.setdefault(s, t)
            if seq in seen:
                break
            if time.time() > deadline:
                workers.check_alive()
                return None
            time.sleep(0.0005)
        return seen[seq]

    lat: list[float] = []
    # From the enqueue call's start instead: includes the enqueue's own round trips. Through a
    # pooler the enqueuer hears of its commit one hop later than the server (and a LISTEN on a
    # direct connection) knows of it, which shortens the figure from the commit; this one is not.
    from_call: list[float] = []
    missed = 0
    # The idle gap before each enqueue. A worker that polls (no LISTEN) picks a job up on its next
    # tick, so a gap much shorter than the poll interval would put every enqueue at the same phase
    # of it (just after the tick that ran the previous job) and measure the interval minus the gap;
    # the polling rows use a gap as wide as the interval, so the phase is uniform, as for real arrivals.
    gap_low, gap_high = (float(x) for x in p.get("gap_s", (0.05, 0.15)))
    try:
        # Warm-up: the worker is ready once it has run these (process start, imports, LISTEN).
        for w in range(3):
            system.enqueue_one(-1 - w, queue="bench")
            if wait_for(-1 - w, float(p.get("startup_timeout", 90))) is None:
                raise TimeoutError(f"the worker ran no warm-up job within {p.get('startup_timeout', 90)}s")
        time.sleep(0.3)
        rng = random.Random(7)
        for seq in range(samples):
            time.sleep(rng.uniform(gap_low, gap_high))  # idle gap, see gap_s above
            issued = time.time()
            system.enqueue_one(seq, queue="bench")
            committed = time.time()
            started = wait_for(seq, float(p.get("sample_timeout", 10)))
            if started is None:
                missed += 1
                continue
            lat.append((started - committed) * 1000.0)
            from_call.append((started - issued) * 1000.0)
    finally:
        workers.stop()
    if not lat:
        raise RuntimeError("no sample was picked up")
    result.update(
        {
            "p50_ms": _percentile(lat, 0.50),
            "p95_ms": _percentile(lat, 0.95),
            "p99_ms": _percentile(lat, 0.99),
            "mean_ms": statistics.fmean(lat),
            "p50_from_call_ms": _percentile(from_call, 0.50),
            "p99_from_call_ms": _percentile(from_call, 0.99),
            "enqueue_call_p50_ms": _percentile([f - c for f, c in zip(from_call, lat, strict=True)], 0.50),
            "max_ms": max(lat),
            "samples": len(lat),
            "missed": missed,
        }
    )
    return result


# ---- weighted fairness --------------------------------------------------------------------------


def fairness(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Queues A (min 2, weight 3) and B (min 2, weight 1) share a global 24; n sleep jobs each.

    The running counts are rebuilt exactly from the handler start/end lines, sampled every 10 ms.
    The contended window runs from the first moment both queues have a job running to the last
    handler start of the queue that runs out of work first (after it, one queue has no backlog).
    """
    n, ms, global_max = int(p["n"]), int(p["ms"]), int(p["global_max"])
    queues = p["queues"]  # {"A": {"min": 2, "weight": 3}, "B": {...}}
    processes, scope = int(p.get("processes", 1)), p.get("scope", "process")
    if not system.supports_weighted or (scope == "cluster" and not system.supports_cluster):
        from bench.systems.base import UnsupportedError

        raise UnsupportedError(system.weighted_reason if not system.supports_weighted else system.cluster_reason)
    names = sorted(queues)
    for index, name in enumerate(names):
        system.bulk_enqueue(n, kind="sleep", queue=name, seq_start=index * n, ms=ms)
    log_path = system.workdir / "handler.log"
    weighted = {"global_max": global_max, "queues": queues, "scope": scope}
    workers = system.start_worker(global_max, processes, names, log_path, weighted=weighted)
    try:
        _wait_completed(system, workers, n * len(names), float(p.get("timeout", 600)))
    finally:
        workers.stop()
    events, _ = handlerlog.read(str(log_path))
    spans: dict[int, list[Any]] = {}
    for ev, seq, queue, t, _pid in events:
        span = spans.setdefault(seq, [queue, None, None])
        span[1 if ev == "S" else 2] = t
    if len(spans) != n * len(names) or any(s[1] is None or s[2] is None for s in spans.values()):
        raise RuntimeError(f"expected {n * len(names)} complete handler spans, got {len(spans)}")
    # Sweep: exact running counts per queue at every change, then sampled on a 10 ms grid.
    changes = sorted(
        [(s[1], 1, s[0]) for s in spans.values()] + [(s[2], -1, s[0]) for s in spans.values()],
        key=lambda c: (c[0], c[1]),
    )
    running = dict.fromkeys(names, 0)
    timeline = []  # (time, {queue: running})
    max_total = 0
    for t, delta, queue in changes:
        running[queue] += delta
        max_total = max(max_total, sum(running.values()))
        timeline.append((t, dict(running)))
    last_start = {q: max(s[1] for s in spans.values() if s[0] == q) for q in names}
    both_from = next(t for t, r in timeline if all(r[q] > 0 for q in names))
    window_end = min(last_start.values())
    grid, i, step = [], 0, 0.010
    t = both_from
    current = dict.fromkeys(names, 0)
    while t <= window_end:
        while i < len(timeline) and timeline[i][0] <= t:
            current = timeline[i][1]
            i += 1
        grid.append(dict(current))
        t += step
    if not grid:
        raise RuntimeError("no contended window: one queue ran out before both were running")
    means = {q: statistics.fmean(g[q] for g in grid) for q in names}
    overflow = global_max - sum(int(queues[q]["min"]) for q in names)
    total_weight = sum(int(queues[q]["weight"]) for q in names)
    ideal = {q: int(queues[q]["min"]) + overflow * int(queues[q]["weight"]) / total_weight for q in names}
    return {
        **{f"mean_running_{q}": means[q] for q in names},
        **{f"ideal_running_{q}": ideal[q] for q in names},
        "split": ":".join(f"{means[q]:.1f}" for q in names),
        "ideal_split": ":".join(f"{ideal[q]:g}" for q in names),
        "share_error": max(abs(means[q] - ideal[q]) for q in names),
        "max_total_running": max_total,
        "global_max": global_max,
        "mean_total_running": statistics.fmean(sum(g.values()) for g in grid),
        "window_seconds": window_end - both_from,
        "total_seconds": max(s[2] for s in spans.values()) - min(s[1] for s in spans.values()),
        "jobs": len(spans),
    }


def roundtrip(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """``SELECT 1`` in autocommit on one connection to the system's URL (through the pooler, for the
    pooler rows) and, when the harness has a different (direct) URL, on one to that too, in
    alternating blocks of 100: the cost of one round trip, which every statement a worker or an
    enqueuer runs pays once, both ways measured side by side so a burst of load elsewhere on the
    machine hits both. Figures are the median of the blocks' means (robust to such bursts) and the
    plain mean. Not prepared on either path (psycopg's automatic preparing is off)."""
    import psycopg

    n, block = int(p["n"]), 100
    urls = {"roundtrip": system.db_url}
    if system.harness_url != system.db_url:
        urls["roundtrip_direct"] = system.harness_url
    conns = {name: psycopg.connect(url, autocommit=True, prepare_threshold=None) for name, url in urls.items()}
    blocks: dict[str, list[float]] = {name: [] for name in urls}
    try:
        for conn in conns.values():
            for _ in range(50):  # warm-up: connection set-up, the server's plan cache
                conn.execute("SELECT 1")
        for _ in range(max(1, n // block)):
            for name, conn in conns.items():
                t0 = time.perf_counter()
                for _ in range(block):
                    conn.execute("SELECT 1")
                blocks[name].append((time.perf_counter() - t0) / block * 1e6)
    finally:
        for conn in conns.values():
            conn.close()
    result: dict[str, Any] = {"n": len(blocks["roundtrip"]) * block}
    for name, means in blocks.items():
        result[f"{name}_us"] = statistics.median(means)
        result[f"{name}_mean_us"] = statistics.fmean(means)
    return result


def fill(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Add ``n`` finished jobs (the runner then uses this database as the template of the scale runs)."""
    n = int(p["n"])
    t0 = time.perf_counter()
    system.add_finished_rows(n)
    return {"finished_rows": n, "seconds": time.perf_counter() - t0, "unfinished": system.count_unfinished()}


METRICS = {
    "fill": fill,
    "single": single_enqueue,
    "bulk": bulk_enqueue,
    "drain": drain,
    "latency": latency,
    "fairness": fairness,
    "roundtrip": roundtrip,
}
