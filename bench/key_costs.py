"""What a keyed claim and a key sweep cost at K keys: the allocator, the sweep's pass, the SQL.

    python bench/key_costs.py [--jobs N] [--keys K ...] [--claims C]

For each K: ``KeyShares`` granting 50 slots (and the 50 ends) with K backlogged keys, in
microseconds; the sweep's pass over K found keys in this process, in milliseconds; then, on N
jobs over K keys in the embedded PostgreSQL (bench/fairness.py's database), C claims of 50 keys
of one job each (the rotation's grant when K >= 50) through claim_keyed_jobs with the key
cursors, then the last claim and one find_due_keys under EXPLAIN (ANALYZE, BUFFERS): their
execution time and shared buffers. Whatever grows with K here is a per-key cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

from bench.fair_keys import QUEUE, _clean, _insert, _vacuum  # noqa: E402
from bench.fairness import _setup_django  # noqa: E402


def pick_cost(keys: int, rounds: int = 500) -> float:
    """Microseconds of one pick(50) and its 50 ends, K keys backlogged."""
    from awa_django.concurrency.keys import KeyShares

    shares = KeyShares()
    for i in range(keys):
        shares.offer(f"k{i}", 1 << 30)
    started = time.perf_counter()
    for _ in range(rounds):
        for key, granted in shares.pick(50).items():
            for _ in range(granted):
                shares.finished(key, 0.001)
    return (time.perf_counter() - started) / rounds * 1e6


def sweep_pass_cost(keys: int, rounds: int = 20) -> float:
    """Milliseconds of the sweep's pass over K found keys (all known, each with a cursor)."""
    from awa_django.concurrency.keyconfig import QueueKeySettings
    from awa_django.worker.keyed import UNKNOWN_BACKLOG, KeyedClaims

    claims = KeyedClaims(QUEUE, QueueKeySettings())
    now = datetime.now(UTC)
    rows = [(f"k{i}", 2, now, 1000 + i) for i in range(keys)]
    for key, priority, run_at, first_id in rows:
        claims.cursors[key] = (priority, run_at, first_id - 500)
        claims.shares.offer(key, UNKNOWN_BACKLOG)
    started = time.perf_counter()
    for _ in range(rounds):
        claims.sweep_pass(rows)
    return (time.perf_counter() - started) / rounds * 1000


def _explain(cursor: Any, sql: str, params: dict[str, Any]) -> tuple[float, int]:
    cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
    plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return float(plan[0]["Execution Time"]), int(plan[0]["Plan"].get("Shared Hit Blocks", 0))


def sql_costs(jobs: int, keys: int, claims: int) -> tuple[float, int, float, int]:
    """(claim ms, claim buffers, sweep ms, sweep buffers) after ``claims`` claims of 50 keys."""
    from django.db import connection

    from awa_django.models import Queue
    from awa_django.sql import statements
    from awa_django.worker.keyed import claim_grants

    _clean()
    _vacuum()
    Queue.objects.create(name=QUEUE, max_workers=50)
    _insert(jobs, keys, "noop")
    _vacuum()
    claim = statements["claim_keyed_jobs"]
    cursors: dict[str, tuple[int, datetime, int]] = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT fair_key FROM awa_job WHERE queue = %s ORDER BY 1", [QUEUE])
        order = [row[0] for row in cursor.fetchall()]
        params: dict[str, Any] = {}
        for n in range(claims + 1):
            chosen = [order[(n * 50 + j) % len(order)] for j in range(50)]
            params = {
                "queue": QUEUE,
                "grants": claim_grants(dict.fromkeys(chosen, 1), cursors),
                "deadline": None,
                "worker": "bench",
            }
            if n == claims:
                break
            cursor.execute(claim, params)
            for row in cursor.fetchall():  # id, ..., priority (7), ..., run_at (9), ..., fair_key (12)
                cursors[row[12]] = (row[7], row[9], row[0])
        claim_ms, claim_buffers = _explain(cursor, claim, params)
        sweep_ms, sweep_buffers = _explain(cursor, statements["find_due_keys"], {"queue": QUEUE, "limit": 100_000})
    _clean()
    return claim_ms, claim_buffers, sweep_ms, sweep_buffers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--claims", type=int, default=400)
    args = parser.parse_args()
    _setup_django()
    print(
        f"| keys | pick(50) + 50 ends, us | sweep pass, ms | claim of 50 keys, ms | its buffers"
        f" | find_due_keys, ms | its buffers |  ({args.jobs:,} jobs, after {args.claims} claims)"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for keys in args.keys:
        pick_us, pass_ms = pick_cost(keys), sweep_pass_cost(keys)
        claim_ms, claim_buffers, sweep_ms, sweep_buffers = sql_costs(args.jobs, keys, args.claims)
        print(
            f"| {keys:,} | {pick_us:,.0f} | {pass_ms:.1f} | {claim_ms:.2f} | {claim_buffers:,}"
            f" | {sweep_ms:.1f} | {sweep_buffers:,} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
