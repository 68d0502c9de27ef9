"""The interface every adapter implements, and the plumbing they share.

An adapter is instantiated inside its system's virtualenv by bench/driver.py, against one
freshly created database. The generic metrics (bench/metrics.py) only use this interface:

    setup()                                   install the system's schema (once, on the template db)
    single_enqueue(n, queue)                  n jobs, each its own call and transaction
    enqueue_one(seq, queue)                   one job, returns after commit (pickup latency)
    bulk_enqueue(n, kind, queue, seq_start, ms)   the system's fastest bulk path
    start_worker(concurrency, processes, queues, weighted, log_path) -> WorkerGroup
    count_completed()                         jobs the system itself records as successfully done
    count_unfinished()                        jobs not yet done (waiting or running)
    add_finished_rows(n)                      make the table look like n jobs already finished
    versions()                                package versions, for the JSON

Jobs carry ``{"seq": <int>}`` (plus ``"ms"`` for sleep jobs); handlers are ``noop`` and
``sleep`` and both write bench/handlerlog.py lines. Anything a system cannot do raises
UnsupportedError(reason), which the report shows as ``skipped: <reason>``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


class UnsupportedError(Exception):
    """The system cannot run this measurement; the message says why."""


class WorkerGroup:
    """The worker processes of one measurement, with their output files."""

    def __init__(self, procs: list[subprocess.Popen[bytes]], outputs: list[Path], started_at: float) -> None:
        self.procs = procs
        self.outputs = outputs
        self.started_at = started_at

    def check_alive(self) -> None:
        for proc, out in zip(self.procs, self.outputs, strict=True):
            code = proc.poll()
            if code is not None:
                raise RuntimeError(f"worker pid {proc.pid} exited with {code}: {tail(out)}")

    def cpu_seconds(self) -> float | None:
        """User + system CPU the worker processes (not their children) have used so far (Linux
        /proc); None elsewhere. Less sensitive to a busy shared machine than wall-clock rates."""
        total = 0.0
        ticks = os.sysconf("SC_CLK_TCK")
        for proc in self.procs:
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                return None
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15)
        return total

    def stop(self, timeout: float = 10.0) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def tail(path: Path, chars: int = 1500) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no output)"
    return " ".join(text[-chars:].split()) or "(no output)"


class System:
    name = "?"
    supports_weighted = False
    weighted_reason = "no weighted per-queue concurrency"
    supports_cluster = False  # one global maximum for every worker process together
    cluster_reason = "no global maximum across worker processes (per-process pools only)"
    # Worker metrics the next start_worker turns on ("prometheus"), for the metrics-overhead row.
    worker_metrics: str | None = None
    metrics_reason = "no worker metrics flavour in this adapter"
    # The table the old-snapshot drains hold a snapshot on (issue 16): the system's job rows.
    job_table = "?"
    # Concurrency actually used by one worker process when 32 is asked for (None = as asked).
    max_concurrency_per_process: int | None = None
    notes: list[str] = []

    def __init__(self, db_url: str, workdir: Path) -> None:
        self.db_url = db_url
        # The harness's own SQL (counting, verification): the system's URL unless the runner gives a
        # direct one (the pooler rows, where db_url is a PgBouncer).
        self.harness_url = db_url
        self.workdir = workdir
        self._conn: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.python = sys.executable

    # ---- plumbing -------------------------------------------------------------------------------

    def sql(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement on the harness's own autocommit connection (``harness_url``); return its rows."""
        import psycopg

        if self._conn is None:
            self._conn = psycopg.connect(self.harness_url, autocommit=True)
        with self._conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def scalar(self, query: str, params: Sequence[Any] | None = None) -> Any:
        return self.sql(query, params)[0][0]

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on this adapter's own event loop (kept, so async pools persist)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def worker_env(self, log_path: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["BENCH_HANDLER_LOG"] = str(log_path)
        env["DATABASE_URL"] = self.db_url
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO_ROOT), env.get("PYTHONPATH", "")] if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start_worker(
        self,
        concurrency: int,
        processes: int,
        queues: Sequence[str],
        log_path: Path,
        weighted: dict[str, Any] | None = None,
    ) -> WorkerGroup:
        if weighted is not None and not self.supports_weighted:
            raise UnsupportedError(self.weighted_reason)
        if weighted is not None and weighted.get("scope") == "cluster" and not self.supports_cluster:
            raise UnsupportedError(self.cluster_reason)
        self.prepare_worker(concurrency, queues, weighted)
        env = self.worker_env(log_path)
        procs, outputs = [], []
        started_at = time.time()
        for index in range(processes):
            out = self.workdir / f"worker-{len(list(self.workdir.glob('worker-*.log')))}-{index}.log"
            cmd = self.worker_command(concurrency, queues, weighted)
            with open(out, "wb") as fh:
                procs.append(
                    subprocess.Popen(
                        cmd, cwd=REPO_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                )
            outputs.append(out)
        return WorkerGroup(procs, outputs, started_at)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        found = {}
        for dist in self.distributions():
            try:
                found[dist] = version(dist)
            except PackageNotFoundError:
                found[dist] = "not installed"
        return found

    # ---- what each adapter provides -------------------------------------------------------------

    def distributions(self) -> list[str]:
        return []

    def setup(self) -> None:
        raise NotImplementedError

    def single_enqueue(self, n: int, queue: str = "bench") -> None:
        raise NotImplementedError

    def enqueue_one(self, seq: int, queue: str = "bench") -> None:
        raise NotImplementedError

    def bulk_enqueue(
        self, n: int, *, kind: str = "noop", queue: str = "bench", seq_start: int = 0, ms: int | None = None
    ) -> None:
        raise NotImplementedError

    def prepare_worker(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> None:
        """Anything the database needs before the worker starts (e.g. queue settings rows)."""

    def worker_command(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> list[str]:
        raise NotImplementedError

    def count_completed(self) -> int:
        raise NotImplementedError

    def count_unfinished(self) -> int:
        raise NotImplementedError

    def add_finished_rows(self, n: int) -> None:
        raise UnsupportedError("cannot synthesise finished rows")
