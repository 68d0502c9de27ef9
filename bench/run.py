#!/usr/bin/env python3
"""Side-by-side benchmark of awa_django and its peers on one PostgreSQL server.

    python bench/run.py                 # full run: 3 repetitions of every measurement
    python bench/run.py --quick         # smoke run: 1 repetition, small N (a few minutes)
    python bench/run.py --systems awa_django,pgqueuer --metrics single,bulk --reps 5

Stdlib only. Each system gets its own virtualenv under bench/.venvs/ (created on first use) and
its own database on the server; every measurement runs in a subprocess of that venv
(bench/driver.py) on a fresh copy of the system's template database, with a timeout. A system or
measurement that cannot run is reported as "skipped: <reason>" (or "error: ..."), never dropped.
The server is PostgreSQL 15 from the Debian install (pg_ctlcluster 15 main start), or the one
BENCH_DATABASE_URL points at (a URL to a maintenance database of a role that may CREATE DATABASE).
Prints one markdown table; writes JSON (and the table) to bench/results/.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from bench import pgbouncer  # noqa: E402
from bench.systems import COMMON_REQUIREMENTS, ORDER, SYSTEMS  # noqa: E402

VENVS = BENCH / ".venvs"
RESULTS = BENCH / "results"
ROLE, PASSWORD = "awa_bench", "awa_bench"
FAIRNESS_QUEUES = {"A": {"min": 2, "weight": 3}, "B": {"min": 2, "weight": 1}}

FULL = {
    "single": 10_000,
    "bulk": 50_000,
    "drain": 20_000,
    "concurrency": 32,
    "latency_samples": 200,
    "fairness_jobs": 2_000,
    "fairness_ms": 50,
    "global_max": 24,
    "finished_rows": 1_000_000,
    "scale_latency_samples": 200,
    "roundtrips": 5_000,
    # The old-snapshot drains (issue 16): jobs drained by drain_30k / drain_30k_snapshot and so on.
    "drain_30k": 30_000,
    "drain_100k": 100_000,
    "drain_300k": 300_000,
}
QUICK = {
    "single": 1_000,
    "bulk": 5_000,
    "drain": 1_000,
    "concurrency": 32,
    "latency_samples": 15,
    "fairness_jobs": 400,
    "fairness_ms": 50,
    "global_max": 24,
    "finished_rows": 50_000,
    "scale_latency_samples": 10,
    "roundtrips": 1_000,
    "drain_30k": 3_000,
    "drain_100k": 10_000,
    "drain_300k": 30_000,
}

# The old-snapshot drain pairs, by the size key that holds their job count.
SNAPSHOT_DRAINS = ("drain_30k", "drain_100k", "drain_300k")
# Their completion wait allows n / this many seconds (at least 300): a system that drains slower,
# with the snapshot held or not, is reported as timed out with how far it got.
SNAPSHOT_DRAIN_MIN_RATE = 200
# Rows run only when --metrics names them: the old-snapshot drains would add hours to a full run
# (procrastinate drains ~370 jobs/s, so 300,000 jobs take a quarter of an hour per repetition).
OPT_IN = {key + suffix for key in SNAPSHOT_DRAINS for suffix in ("", "_snapshot")}


# How the pooler rows reach the server: "via" pgbouncer (one started for each repetition, transaction
# mode) or direct; "listen" on a direct connection (AWA LISTEN_DATABASE_URL) or off (polling every
# POLL_INTERVAL, the default 1 s). Every one sets AWA["POOLER"] = "transaction".
POOLED = {"via": "pgbouncer", "listen": "off"}
POOLED_LISTEN = {"via": "pgbouncer", "listen": "direct"}
POOLER_SETTINGS_DIRECT = {"via": "direct", "listen": "off"}
# The pickup rows were first named "latency"; both names are accepted on the command line.
METRIC_ALIASES = {"pickup": "latency", "pickup_finished": "latency_finished"}


# (key, driver op, params builder, template kind, driver timeout seconds)
def plan(size: dict[str, int]) -> list[tuple[str, str, dict[str, Any], str, float]]:
    drain = {"n": size["drain"], "concurrency": size["concurrency"]}
    return [
        ("single", "single", {"n": size["single"]}, "base", 600),
        ("bulk", "bulk", {"n": size["bulk"]}, "base", 600),
        ("drain", "drain", {**drain, "processes": 1, "timeout": 1800}, "base", 1900),
        # The same drain with the worker's Prometheus metrics on (awa_django only): their cost.
        ("drain_metrics", "drain", {**drain, "processes": 1, "metrics": "prometheus", "timeout": 1800}, "base", 1900),
        (
            "latency",
            "latency",
            {"samples": size["latency_samples"], "concurrency": size["concurrency"]},
            "base",
            60 + size["latency_samples"] * 12,
        ),
        (
            "fairness",
            "fairness",
            {
                "n": size["fairness_jobs"],
                "ms": size["fairness_ms"],
                "global_max": size["global_max"],
                "queues": FAIRNESS_QUEUES,
                "timeout": 600,
            },
            "base",
            660,
        ),
        (
            "fairness_cluster",
            "fairness",
            {
                "n": size["fairness_jobs"],
                "ms": size["fairness_ms"],
                "global_max": size["global_max"],
                "queues": FAIRNESS_QUEUES,
                "timeout": 600,
                "processes": 3,
                "scope": "cluster",
            },
            "base",
            660,
        ),
        ("drain_weighted", "drain", {**drain, "processes": 1, "weighted": True, "timeout": 1800}, "base", 1900),
        (
            "drain_cluster",
            "drain",
            {**drain, "processes": 1, "weighted": True, "scope": "cluster", "timeout": 1800},
            "base",
            1900,
        ),
        ("drain_weighted_4p", "drain", {**drain, "processes": 4, "weighted": True, "timeout": 1800}, "base", 1900),
        (
            "drain_cluster_4p",
            "drain",
            {**drain, "processes": 4, "weighted": True, "scope": "cluster", "timeout": 1800},
            "base",
            1900,
        ),
        # Through a PgBouncer in transaction mode (awa_django only; see call_pooled): the same drain
        # and pickup with AWA["POOLER"] = "transaction", enqueue and worker through the bouncer.
        ("drain_pgbouncer", "drain", {**drain, "processes": 1, "timeout": 1800, "pooler": POOLED}, "base", 1900),
        # The same settings on a direct connection: what the settings cost without the extra hop.
        (
            "drain_pooler_direct",
            "drain",
            {**drain, "processes": 1, "timeout": 1800, "pooler": POOLER_SETTINGS_DIRECT},
            "base",
            1900,
        ),
        (
            "pickup_pgbouncer",
            "latency",
            # Gaps as wide as the 1 s poll interval: enqueues at a uniform phase of it (metrics.latency).
            {
                "samples": size["latency_samples"],
                "concurrency": size["concurrency"],
                "pooler": POOLED,
                "gap_s": [0.05, 1.05],
            },
            "base",
            60 + size["latency_samples"] * 12,
        ),
        (
            "pickup_pgbouncer_listen",
            "latency",
            {"samples": size["latency_samples"], "concurrency": size["concurrency"], "pooler": POOLED_LISTEN},
            "base",
            60 + size["latency_samples"] * 12,
        ),
        # Single enqueue (one job per transaction) the same three ways: the hop and the unprepared
        # INSERT on the enqueue path, where a WAL flush per job dominates.
        ("single_pgbouncer", "single", {"n": size["single"], "pooler": POOLED}, "base", 600),
        ("single_pooler_direct", "single", {"n": size["single"], "pooler": POOLER_SETTINGS_DIRECT}, "base", 600),
        # One round trip (SELECT 1) through the bouncer and, alternating with it, direct: the hop
        # every statement pays.
        ("roundtrip_pgbouncer", "roundtrip", {"n": size["roundtrips"], "pooler": POOLED}, "base", 300),
        ("drain_2p", "drain", {**drain, "processes": 2, "timeout": 1800}, "base", 1900),
        ("drain_4p", "drain", {**drain, "processes": 4, "timeout": 1800}, "base", 1900),
        (
            "latency_finished",
            "latency",
            {"samples": size["scale_latency_samples"], "concurrency": size["concurrency"]},
            "finished",
            60 + size["scale_latency_samples"] * 12,
        ),
        *snapshot_drains(size),
    ]


def snapshot_drains(size: dict[str, int]) -> list[tuple[str, str, dict[str, Any], str, float]]:
    """drain_<n> and drain_<n>_snapshot: the same one-process drain without and with an old
    snapshot held on the system's job table from before the worker starts to the drain's end."""
    steps: list[tuple[str, str, dict[str, Any], str, float]] = []
    for key in SNAPSHOT_DRAINS:
        n = size[key]
        wait = max(300, n // SNAPSHOT_DRAIN_MIN_RATE)
        params = {"n": n, "concurrency": size["concurrency"], "processes": 1, "timeout": wait, "quiet_poll": True}
        steps.append((key, "drain", {**params, "old_snapshot": False}, "base", wait + 300))
        steps.append((key + "_snapshot", "drain", {**params, "old_snapshot": True}, "base", wait + 300))
    return steps


# ---- the server -----------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class Server:
    """The PostgreSQL server: the admin URL, and databases made and dropped through psql."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.started_cluster: tuple[str, str] | None = None
        if not shutil.which("psql"):
            raise SystemExit("psql is needed (apt-get install postgresql-client)")
        if os.environ.get("BENCH_DATABASE_URL"):
            self.url = os.environ["BENCH_DATABASE_URL"]
            self.origin = "BENCH_DATABASE_URL"
        else:
            self.url = self._debian_cluster(args.cluster)
            self.origin = f"Debian cluster {args.cluster}"
        if not self.url.startswith(("postgres://", "postgresql://")):
            raise SystemExit("BENCH_DATABASE_URL must be a postgresql:// URL")
        host = urlsplit(self.url).hostname or ""
        if host not in ("", "localhost", "127.0.0.1", "::1") and not host.startswith("/"):
            raise SystemExit(f"the benchmark only talks to a local server, not {host!r}")

    def _debian_cluster(self, cluster: str) -> str:
        version, name = cluster.split("/")
        if not shutil.which("pg_lsclusters"):
            raise SystemExit("no BENCH_DATABASE_URL and no Debian PostgreSQL (pg_lsclusters) on this machine")
        rows = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True).stdout
        line = next((r.split() for r in rows.splitlines() if r.split()[:2] == [version, name]), None)
        if line is None:
            raise SystemExit(f"no PostgreSQL cluster {cluster} (pg_lsclusters lists: {rows.strip()})")
        port, status = line[2], line[3]
        if status != "online":
            log(f"starting PostgreSQL cluster {cluster}")
            subprocess.run(["pg_ctlcluster", version, name, "start"], check=True, timeout=120)
            self.started_cluster = (version, name)
        # A password role for TCP on localhost (pg_hba has scram for 127.0.0.1); peer auth would
        # need the OS user to be postgres. Created once, idempotently, as the postgres superuser.
        role_sql = (
            f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN "
            f"CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'; END IF; END$$;"
        )
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else ["sudo", "-u", "postgres"]
        subprocess.run(
            [*as_postgres, "psql", "-p", port, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", role_sql],
            check=True,
            timeout=60,
            capture_output=True,
            cwd="/",
        )
        return f"postgresql://{ROLE}:{PASSWORD}@127.0.0.1:{port}/postgres"

    def psql(self, sql: str, db: str | None = None, timeout: float = 600) -> str:
        url = self.url if db is None else with_db(self.url, db)
        done = subprocess.run(
            ["psql", url, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, timeout=timeout
        )
        if done.returncode:
            raise RuntimeError(done.stderr.strip())
        return done.stdout.strip()

    def recreate(self, name: str, template: str | None = None) -> str:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return with_db(self.url, name)

    def drop(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def describe(self) -> dict[str, str]:
        settings = [
            "server_version",
            "shared_buffers",
            "synchronous_commit",
            "fsync",
            "max_connections",
            "work_mem",
            "wal_level",
        ]
        values = self.psql(
            "SELECT string_agg(name || '=' || current_setting(name), ';' ORDER BY name) "
            "FROM pg_settings WHERE name = ANY('{" + ",".join(settings) + "}')"
        )
        return dict(item.split("=", 1) for item in values.split(";")) | {"origin": self.origin}

    def stop_if_started(self) -> None:
        if self.started_cluster:
            others = self.psql("SELECT string_agg(datname, ', ') FROM pg_database WHERE datname LIKE 'bench\\_%'")
            if others:
                log(f"leaving PostgreSQL cluster {'/'.join(self.started_cluster)} running: another run uses {others}")
                return
            log("stopping the PostgreSQL cluster this run started")
            subprocess.run(["pg_ctlcluster", *self.started_cluster, "stop"], timeout=120)


# ---- the virtualenvs ------------------------------------------------------------------------------


def checkout_dependencies() -> list[str]:
    """awa_django's declared runtime dependencies (pyproject.toml), installed into its venv."""
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10: the list is simple enough to read by hand
        import re

        block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
        return re.findall(r'^\s*"([^"]+)"', block.group(1), re.M) if block else []
    return list(tomllib.loads(text)["project"]["dependencies"])


def ensure_venv(name: str, base_python: str) -> Path:
    """The system's venv python, creating/updating the venv when its requirements changed."""
    spec = SYSTEMS[name]
    requirements = [*spec["requirements"], *COMMON_REQUIREMENTS]  # type: ignore[misc]
    if spec.get("from_checkout"):
        requirements += checkout_dependencies()
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / ".bench-requirements.json"
    wanted = json.dumps(sorted(requirements))
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    log(f"{name}: building its virtualenv ({', '.join(requirements)})")
    if not python.exists():
        subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=300, capture_output=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise RuntimeError("pip install failed: " + (lines[-1] if lines else f"exit {done.returncode}"))
    stamp.write_text(wanted)
    return python


# ---- one driver call ------------------------------------------------------------------------------


def call_driver(
    python: Path, system: str, op: str, db_url: str, params: dict[str, Any], timeout: float, workroot: Path
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{system}-{op}-", dir=workroot))
    out = workdir / "result.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    for inherited in ("BENCH_HANDLER_LOG", "BENCH_AWA_POOLER", "BENCH_AWA_LISTEN_DATABASE_URL"):
        env.pop(inherited, None)  # set per call (params["env"]), never leaked from the caller's shell
    cmd = [
        str(python),
        "-m",
        "bench.driver",
        "--system",
        system,
        "--op",
        op,
        "--db-url",
        db_url,
        "--params",
        json.dumps(params),
        "--workdir",
        str(workdir),
        "--out",
        str(out),
    ]
    with open(workdir / "driver.log", "wb") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and the workers it started
            proc.wait()
            return {"error": f"timed out after {timeout:.0f}s"}
        finally:
            try:  # workers left behind by a crashed driver share its process group
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if not out.exists():
        text = (workdir / "driver.log").read_text(errors="replace")
        return {"error": f"driver exited {proc.returncode} without a result: {' '.join(text[-600:].split())}"}
    result = json.loads(out.read_text())
    result["workdir"] = str(workdir)
    return result


def pgbouncer_stats(bouncer: pgbouncer.PgBouncer, dbname: str) -> dict[str, int]:
    """PgBouncer's totals for ``dbname`` from its admin console (``SHOW STATS``): transactions and
    statements the clients ran through it, and the microseconds they spent in them and waiting for a
    server connection."""
    done = subprocess.run(
        ["psql", bouncer.url("pgbouncer"), "-qA", "-P", "footer=off", "-F", "\t", "-c", "SHOW STATS"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode:
        raise RuntimeError(f"SHOW STATS on pgbouncer: {done.stderr.strip()}")
    lines = done.stdout.strip().splitlines()
    head = lines[0].split("\t")
    for line in lines[1:]:
        row = dict(zip(head, line.split("\t"), strict=True))
        if row.get("database") == dbname:
            wanted = ("total_xact_count", "total_query_count", "total_xact_time", "total_query_time", "total_wait_time")
            return {f"pgbouncer_{k}": int(row[k]) for k in wanted if k in row}
    return {}


def call_pooled(
    server: Server,
    python: Path,
    system: str,
    op: str,
    dbname: str,
    params: dict[str, Any],
    timeout: float,
    workroot: Path,
) -> dict[str, Any]:
    """One driver call of a pooler row: AWA["POOLER"] = "transaction" in the system's project, and
    for ``via`` pgbouncer a PgBouncer in transaction mode started for this call alone (fresh
    statistics, a fresh log, no server connection to the database the last repetition dropped) and
    always stopped after it. Enqueue and workers go through it; the harness's counting and, for
    ``listen`` direct, the worker's LISTEN use a direct connection."""
    pooler = params["pooler"]
    direct_url = with_db(server.url, dbname)
    env = {"BENCH_AWA_POOLER": "transaction"}
    if pooler["listen"] == "direct":
        env["BENCH_AWA_LISTEN_DATABASE_URL"] = direct_url
    driver_params = {**params, "env": env, "harness_url": direct_url}
    if pooler["via"] == "direct":
        return call_driver(python, system, op, direct_url, driver_params, timeout, workroot)
    parts = urlsplit(server.url)
    bouncer = pgbouncer.start(
        parts.hostname or "",
        parts.port or 5432,
        parts.username or "postgres",
        parts.password or "",
        pool_mode="transaction",
        admin=True,
    )
    atexit.register(bouncer.stop)  # also stopped if this process exits between here and finally
    try:
        res = call_driver(python, system, op, bouncer.url(dbname), driver_params, timeout, workroot)
        if "ok" in res:
            stats = pgbouncer_stats(bouncer, dbname)
            jobs = res["ok"].get("n") or res["ok"].get("samples")
            if stats and jobs and op == "drain":
                stats["pgbouncer_queries_per_job"] = stats["pgbouncer_total_query_count"] / jobs
                stats["pgbouncer_xacts_per_job"] = stats["pgbouncer_total_xact_count"] / jobs
            res["ok"].update(stats)
            # Warnings and errors on the pooler's side (a server connection lost, a refused login).
            trouble = [ln for ln in bouncer.log.splitlines() if " WARNING " in ln or " ERROR " in ln]
            res["ok"]["pgbouncer_log_problems"] = len(trouble)
            if trouble:
                res["ok"]["pgbouncer_log_first_problems"] = trouble[:5]
        return res
    finally:
        bouncer.stop()
        atexit.unregister(bouncer.stop)


# ---- aggregation and the table --------------------------------------------------------------------


def median_of(reps: list[dict[str, Any]]) -> dict[str, Any]:
    keys = {k for r in reps for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    med = {k: statistics.median(r[k] for r in reps if k in r) for k in sorted(keys)}
    for flag in ("exactly_once",):
        if any(flag in r for r in reps):
            med[flag] = all(r.get(flag) for r in reps)
    return med


def summarise(raw: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r["ok"] for r in raw if "ok" in r]
    if ok:
        summary: dict[str, Any] = {"status": "ok", "median": median_of(ok), "reps_ok": len(ok), "reps": len(raw)}
        failed = [r for r in raw if "ok" not in r]
        if failed:
            summary["partial"] = f"{len(failed)} of {len(raw)} reps failed: {reason(failed[0])}"
        return summary
    if raw and all("skipped" in r for r in raw):
        return {"status": "skipped", "reason": raw[0]["skipped"]}
    return {"status": "error", "reason": reason(raw[0]) if raw else "not run"}


def reason(r: dict[str, Any]) -> str:
    return str(r.get("skipped") or r.get("error") or "?")


ROWS = [
    # (label, metric key, figure, format, higher is better)
    ("single enqueue, jobs/s", "single", "jobs_per_s", "int", True),
    ("bulk enqueue, jobs/s", "bulk", "jobs_per_s", "int", True),
    ("drain 1 proc x {concurrency}, jobs/s", "drain", "jobs_per_s", "int", True),
    ("drain 1 proc x {concurrency}, Prometheus metrics on, jobs/s", "drain_metrics", "jobs_per_s", "int", True),
    ("drain 1 proc, worker CPU per job (10-100 %), µs", "drain", "worker_cpu_us_per_job", "f1", False),
    (
        "drain 1 proc, metrics on, worker CPU per job (10-100 %), µs",
        "drain_metrics",
        "worker_cpu_us_per_job",
        "f1",
        False,
    ),
    ("pickup latency p50, ms", "latency", "p50_ms", "ms", False),
    ("pickup latency p95, ms", "latency", "p95_ms", "ms", False),
    ("pickup latency p99, ms", "latency", "p99_ms", "ms", False),
    ("pickup p50 from the enqueue call's start, ms", "latency", "p50_from_call_ms", "ms", False),
    ("enqueue call (one job, autocommit) p50, ms", "latency", "enqueue_call_p50_ms", "ms", False),
    (
        "drain 1 proc x {concurrency}, through PgBouncer (transaction mode), jobs/s",
        "drain_pgbouncer",
        "jobs_per_s",
        "int",
        True,
    ),
    (
        "drain 1 proc x {concurrency}, POOLER settings on a direct connection (no PgBouncer), jobs/s",
        "drain_pooler_direct",
        "jobs_per_s",
        "int",
        True,
    ),
    (
        "drain through PgBouncer, worker CPU per job (10-100 %), µs",
        "drain_pgbouncer",
        "worker_cpu_us_per_job",
        "f1",
        False,
    ),
    (
        "drain, POOLER settings direct, worker CPU per job (10-100 %), µs",
        "drain_pooler_direct",
        "worker_cpu_us_per_job",
        "f1",
        False,
    ),
    (
        "drain through PgBouncer, statements per job (SHOW STATS)",
        "drain_pgbouncer",
        "pgbouncer_queries_per_job",
        "f2",
        None,
    ),
    (
        "drain through PgBouncer, transactions per job (SHOW STATS)",
        "drain_pgbouncer",
        "pgbouncer_xacts_per_job",
        "f2",
        None,
    ),
    ("pickup p50 through PgBouncer, LISTEN off (polls every 1 s), ms", "pickup_pgbouncer", "p50_ms", "ms", False),
    ("pickup p99 through PgBouncer, LISTEN off (polls every 1 s), ms", "pickup_pgbouncer", "p99_ms", "ms", False),
    (
        "pickup p50 through PgBouncer, LISTEN on a direct connection, ms",
        "pickup_pgbouncer_listen",
        "p50_ms",
        "ms",
        False,
    ),
    (
        "pickup p99 through PgBouncer, LISTEN on a direct connection, ms",
        "pickup_pgbouncer_listen",
        "p99_ms",
        "ms",
        False,
    ),
    (
        "pickup p50 through PgBouncer, LISTEN direct, from the enqueue call's start, ms",
        "pickup_pgbouncer_listen",
        "p50_from_call_ms",
        "ms",
        False,
    ),
    (
        "enqueue call through PgBouncer (one job, autocommit) p50, ms",
        "pickup_pgbouncer_listen",
        "enqueue_call_p50_ms",
        "ms",
        False,
    ),
    ("fairness A:B running (ideal 17:7)", "fairness", "split", "split", None),
    ("fairness max total running (≤ 24)", "fairness", "max_total_running", "int", None),
    ("fairness mean total running", "fairness", "mean_total_running", "f1", None),
    ("fairness, 3 procs, cluster scope: A:B running (ideal 17:7)", "fairness_cluster", "split", "split", None),
    (
        "fairness, 3 procs, cluster scope: max total running (≤ 24)",
        "fairness_cluster",
        "max_total_running",
        "int",
        None,
    ),
    ("fairness, 3 procs, cluster scope: mean total running", "fairness_cluster", "mean_total_running", "f1", None),
    ("drain 1 proc, weighted (global {concurrency}), jobs/s", "drain_weighted", "jobs_per_s", "int", True),
    ("drain 1 proc, cluster scope (global {concurrency}), jobs/s", "drain_cluster", "jobs_per_s", "int", True),
    ("drain 4 procs, weighted (global {concurrency} each), jobs/s", "drain_weighted_4p", "jobs_per_s", "int", True),
    (
        "drain 4 procs, cluster scope (one global 4 x {concurrency}), jobs/s",
        "drain_cluster_4p",
        "jobs_per_s",
        "int",
        True,
    ),
    ("single enqueue through PgBouncer, jobs/s", "single_pgbouncer", "jobs_per_s", "int", True),
    (
        "single enqueue, POOLER settings direct (no PgBouncer), jobs/s",
        "single_pooler_direct",
        "jobs_per_s",
        "int",
        True,
    ),
    (
        "SELECT 1 round trip, direct (alternating with the next row), µs",
        "roundtrip_pgbouncer",
        "roundtrip_direct_us",
        "int",
        False,
    ),
    ("SELECT 1 round trip through PgBouncer, µs", "roundtrip_pgbouncer", "roundtrip_us", "int", False),
    ("drain 2 procs x {concurrency}, jobs/s", "drain_2p", "jobs_per_s", "int", True),
    ("drain 4 procs x {concurrency}, jobs/s", "drain_4p", "jobs_per_s", "int", True),
    ("pickup p50 with {finished} finished rows, ms", "latency_finished", "p50_ms", "ms", False),
    ("pickup p99 with {finished} finished rows, ms", "latency_finished", "p99_ms", "ms", False),
    *(
        row
        for key in SNAPSHOT_DRAINS
        for row in (
            (f"drain {{{key}}} jobs, 1 proc x {{concurrency}}, jobs/s", key, "jobs_per_s", "int", True),
            (f"drain {{{key}}} jobs, old snapshot held, jobs/s", key + "_snapshot", "jobs_per_s", "int", True),
            # The system's own rate with the snapshot held over its rate without (medians).
            (f"drain {{{key}}} jobs: held ÷ none", key + "_snapshot", "ratio_to:" + key, "ratio", None),
        )
    ),
]


def fmt(value: Any, kind: str) -> str:
    if kind == "int":
        return f"{value:,.0f}"
    if kind == "ms":
        return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
    if kind == "f1":
        return f"{value:.1f}"
    if kind == "f2":
        return f"{value:.2f}"
    if kind == "ratio":
        return f"{value:.2f}x"
    return str(value)


def table(results: dict[str, dict[str, Any]], systems: list[str], size: dict[str, int], keys: set[str]) -> str:
    notes: list[str] = []

    def note(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    ref = "awa_django"
    peers = [s for s in systems if s != ref]
    head = ["measurement"]
    if ref in systems:
        head.append(ref)
    for peer in peers:
        head.append(str(SYSTEMS[peer]["title"]))
        if ref in systems:
            head.append("awa_django ÷")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(system: str, key: str, figure: str, kind: str) -> tuple[str, float | None]:
        entry = results.get(system, {}).get(key)
        if entry is None:
            return "—", None
        if entry["status"] == "skipped":
            return "skipped " + note(f"{SYSTEMS[system]['title']}, {key}: skipped: {entry['reason']}"), None
        if entry["status"] == "error":
            return "error " + note(f"{SYSTEMS[system]['title']}, {key}: error: {entry['reason']}"), None
        med = entry["median"]
        if figure.startswith("ratio_to:"):
            # This row's jobs/s over the same system's jobs/s in another row (its own baseline).
            base_key = figure.split(":", 1)[1]
            base = results.get(system, {}).get(base_key)
            if base is None:
                return "—", None
            if base["status"] != "ok":
                return cell(system, base_key, "jobs_per_s", "int")[0], None
            if not base["median"].get("jobs_per_s") or med.get("jobs_per_s") is None:
                return "—", None
            value = med["jobs_per_s"] / base["median"]["jobs_per_s"]
            return fmt(value, kind), value
        if figure == "split":
            text = ":".join(f"{med[f'mean_running_{q}']:.1f}" for q in sorted(FAIRNESS_QUEUES))
            value = None
        else:
            value = med.get(figure)
            if value is None:
                return "—", None
            text = fmt(value, kind)
        if entry.get("partial"):
            text += " " + note(f"{SYSTEMS[system]['title']}, {key}: {entry['partial']}")
        if key.startswith("drain") and med.get("exactly_once") is False:
            text += " (NOT exactly once)"
        return text, value

    finished = f"{size['finished_rows']:,}"
    for label, key, figure, kind, higher in ROWS:
        if key not in keys:
            continue
        counts = {k: f"{v:,}" for k, v in size.items() if k in SNAPSHOT_DRAINS}
        row = [label.format(finished=finished, concurrency=size["concurrency"], **counts)]
        ref_text, ref_value = cell(ref, key, figure, kind) if ref in systems else ("", None)
        if ref in systems:
            row.append(ref_text)
        for peer in peers:
            text, value = cell(peer, key, figure, kind)
            row.append(text)
            if ref in systems:
                ratio = "—"
                if higher is not None and ref_value is not None and value:
                    ratio = f"{ref_value / value:.2f}x"
                row.append(ratio)
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if ref in systems and peers:
        lines.append(
            "awa_django ÷ peer: throughput rows above 1x mean awa_django is faster; latency rows below "
            "1x mean awa_django is faster."
        )
    for system in systems:
        for text in results.get(system, {}).get("_notes", []):
            lines.append(f"- {SYSTEMS[system]['title']}: {text}")
    for index, text in enumerate(notes, 1):
        lines.append(f"- [{index}] {text}")
    return "\n".join(lines)


# ---- the run --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name"))
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory_gb"] = round(int(mem) / 1024 / 1024, 1)
    except (OSError, StopIteration):
        pass
    info["loadavg_start"] = os.getloadavg()
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller N, 1 repetition unless --reps")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (median taken); default 3, quick 1")
    parser.add_argument("--systems", default=",".join(ORDER), help=f"comma list from {','.join(ORDER)}")
    parser.add_argument(
        "--metrics",
        default=None,
        help=f"comma list from {','.join(s[0] for s in plan(FULL) if s[0] not in OPT_IN)} (pickup = latency, "
        "pickup_finished = latency_finished); and only when named: " + ",".join(sorted(OPT_IN)),
    )
    parser.add_argument("--concurrency", type=int, default=None, help="jobs in flight per worker process (default 32)")
    parser.add_argument("--cluster", default="15/main", help="Debian cluster when BENCH_DATABASE_URL is unset")
    parser.add_argument("--python", default=sys.executable, help="interpreter the venvs are built from")
    parser.add_argument("--keep-dbs", action="store_true", help="leave the bench databases behind")
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="run every measurement once per repetition in turn (back to back), not all repetitions of one first",
    )
    parser.add_argument("--keep-workdirs", action="store_true", help="keep handler logs and worker output")
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="pickups per pickup measurement (default 200; quick: 15, and 10 with finished rows)",
    )
    args = parser.parse_args()

    size = dict(QUICK if args.quick else FULL)
    if args.concurrency is not None:
        size["concurrency"] = args.concurrency
    if args.samples is not None:
        size["latency_samples"] = size["scale_latency_samples"] = args.samples
    reps = args.reps or (1 if args.quick else 3)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {ORDER}")
    steps = plan(size)
    if args.quick:  # a smoke run stays bounded: no single measurement may take more than 3 minutes
        steps = [
            (key, op, {**params, **({"timeout": 150} if "timeout" in params else {})}, kind, min(timeout, 180))
            for key, op, params, kind, timeout in steps
        ]
    if args.metrics:
        wanted = {METRIC_ALIASES.get(m.strip(), m.strip()) for m in args.metrics.split(",") if m.strip()}
        unknown_metrics = sorted(wanted - {s[0] for s in steps})
        if unknown_metrics:
            raise SystemExit(
                f"unknown metrics {unknown_metrics}; known: {','.join(s[0] for s in steps)} "
                f"(aliases: {', '.join(f'{a} = {k}' for a, k in METRIC_ALIASES.items())})"
            )
        steps = [s for s in steps if s[0] in wanted]
    else:
        steps = [s for s in steps if s[0] not in OPT_IN]
    # A missing pgbouncer skips its rows with the fix in the reason (a full run still measures the rest).
    pgbouncer_missing: str | None = None
    if any(s[2].get("pooler", {}).get("via") == "pgbouncer" for s in steps) and pgbouncer.PGBOUNCER is None:
        pgbouncer_missing = str(pgbouncer.PgBouncerMissingError())
        log(f"the PgBouncer rows will be skipped: {pgbouncer_missing}")
    # SIGTERM (a CI timeout, kill <pid>) unwinds like Ctrl-C: the finally blocks stop PgBouncer, drop
    # the databases and stop the cluster this run started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    t_start = time.time()
    # Databases are named per run (bench_<pid>_<system>...): two runs on one server (developers
    # sharing a machine) must not drop each other's databases between repetitions.
    prefix = f"bench_{os.getpid()}_"
    RESULTS.mkdir(parents=True, exist_ok=True)
    workroot = Path(tempfile.mkdtemp(prefix="awa-bench-"))
    server = Server(args)
    meta: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "reps": reps,
        "sizes": size,
        "machine": machine(),
        "server": server.describe(),
        "awa_django_commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "systems": {},
    }
    if any("pooler" in s[2] for s in steps) and pgbouncer_missing is None:
        meta["pgbouncer"] = pgbouncer.version()
    log(
        f"server: {meta['server'].get('server_version')} ({server.origin}); {len(systems)} systems, "
        f"{len(steps)} measurements x {reps} reps"
    )
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in systems}
    results: dict[str, dict[str, Any]] = {s: {} for s in systems}
    pythons: dict[str, Path] = {}
    broken: dict[str, str] = {}
    try:
        # 1. venvs and template databases (schema installed once per system per run).
        for system in systems:
            try:
                pythons[system] = ensure_venv(system, args.python)
                url = server.recreate(f"{prefix}{system}_tpl")
                res = call_driver(pythons[system], system, "setup", url, {}, 600, workroot)
                if "ok" not in res:
                    raise RuntimeError(f"setup: {reason(res)}")
                meta["systems"][system] = res["ok"]
                results[system]["_notes"] = res["ok"].get("notes", [])
                log(f"{system}: ready ({', '.join(f'{k} {v}' for k, v in res['ok']['versions'].items())})")
            except Exception as exc:  # reported, never silently dropped
                broken[system] = f"{exc}"
                log(f"{system}: skipped: {exc}")
        # 2. the finished-rows templates for the scale latency runs.
        if any(s[3] == "finished" for s in steps):
            for system in [s for s in systems if s not in broken]:
                url = server.recreate(f"{prefix}{system}_tpl_finished", f"{prefix}{system}_tpl")
                log(f"{system}: filling {size['finished_rows']:,} finished rows")
                fill_timeout = 600 if args.quick else 3600
                res = call_driver(
                    pythons[system], system, "fill", url, {"n": size["finished_rows"]}, fill_timeout, workroot
                )
                raw[system]["_fill"] = [res]
                if "ok" not in res:
                    raw[system]["latency_finished"] = [res]
        # 3. measurements: for each measurement and repetition, every system in turn.
        # --interleave: repetition-major (every measurement once, then again), so that rows to be
        # compared (drain and drain_metrics) are measured back to back on a shared machine.
        order = (
            [(step, rep) for rep in range(reps) for step in steps]
            if args.interleave
            else [(step, rep) for step in steps for rep in range(reps)]
        )
        for (key, op, params, template_kind, timeout), rep in order:
            for system in systems:
                if system in broken:
                    raw[system][key] = [{"skipped": broken[system]}]
                    continue
                if template_kind == "finished" and "ok" not in raw[system].get("_fill", [{"ok": 1}])[0]:
                    continue
                pooler = params.get("pooler")
                if pooler and not SYSTEMS[system].get("pooler"):
                    raw[system][key] = [{"skipped": "not set up behind a transaction pooler (awa_django's rows)"}]
                    continue
                if pooler and pooler["via"] == "pgbouncer" and pgbouncer_missing:
                    raw[system][key] = [{"skipped": pgbouncer_missing}]
                    continue
                template = f"{prefix}{system}_tpl" + ("_finished" if template_kind == "finished" else "")
                url = server.recreate(f"{prefix}{system}", template)
                t0 = time.time()
                if pooler:
                    res = call_pooled(
                        server, pythons[system], system, op, f"{prefix}{system}", params, timeout, workroot
                    )
                else:
                    res = call_driver(pythons[system], system, op, url, params, timeout, workroot)
                raw[system].setdefault(key, []).append(res)
                status = "ok" if "ok" in res else ("skipped" if "skipped" in res else "ERROR")
                brief = ""
                if "ok" in res:
                    figure = next(
                        (res["ok"][k] for k in ("jobs_per_s", "p50_ms", "split", "roundtrip_us") if k in res["ok"]),
                        None,
                    )
                    brief = f" {figure:,.1f}" if isinstance(figure, float) else f" {figure}"
                else:
                    brief = " " + reason(res)[:200]
                log(f"{key} rep {rep + 1}/{reps} {system}: {status}{brief} ({time.time() - t0:.1f}s)")
        for system in systems:
            for key, reps_raw in raw[system].items():
                if not key.startswith("_"):
                    results[system][key] = summarise(reps_raw)
            if "_fill" in raw[system] and "ok" in raw[system]["_fill"][0]:
                results[system]["_fill"] = raw[system]["_fill"][0]["ok"]
    finally:
        if not args.keep_dbs:
            for system in systems:
                for suffix in ("", "_tpl", "_tpl_finished"):
                    try:
                        server.drop(f"{prefix}{system}{suffix}")
                    except Exception:
                        pass
        server.stop_if_started()
        if not args.keep_workdirs:
            shutil.rmtree(workroot, ignore_errors=True)

    meta["seconds"] = round(time.time() - t_start, 1)
    meta["machine"]["loadavg_end"] = os.getloadavg()
    markdown = table(results, systems, size, {step[0] for step in steps})
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{stamp}-{'quick' if args.quick else 'full'}"
    payload = {"meta": meta, "results": results, "raw": raw}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))
    (RESULTS / f"{name}.md").write_text(markdown + "\n")
    print(markdown)
    print(
        f"\n{meta['mode']} run, {reps} rep(s), {meta['seconds']:.0f}s; load average "
        f"{meta['machine']['loadavg_start'][0]:.1f} → {meta['machine']['loadavg_end'][0]:.1f}; "
        f"JSON: {(RESULTS / f'{name}.json').relative_to(REPO)}"
    )


if __name__ == "__main__":
    main()
