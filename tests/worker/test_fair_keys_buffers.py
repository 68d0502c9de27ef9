"""The keyed claim's cost does not grow with the number of keys: buffers touched per claim, by
EXPLAIN (ANALYZE, BUFFERS), with the same backlog spread over 10 keys and over 10,000."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from awa_django.sql import statements
from awa_django.worker.keyed import claim_grants
from awa_django.worker.lanes import LaneCursors

QUEUE = "keyed-buffers"
BACKLOG = 20_000
GRANTS = 8  # keys in one claim, one job each


def buffers_touched(name: str, params: dict[str, Any]) -> int:
    """Shared buffers (hit or read) one execution touched, in a transaction rolled back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statements[name], params)
        plan = cursor.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def backlog_over(queue: str, keys: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_job (kind, queue, fair_key, args, state, priority, attempt, max_attempts, run_at,"
            " created_at, errors, metadata, tags, run_lease)"
            " SELECT 'noop', %s, 'k' || (g %% %s), '{}', 'available', 1 + g %% 4, 0, 25,"
            " now() - interval '1 minute', now(), '[]', '{}', '{}', 0 FROM generate_series(1, %s) AS g",
            [queue, keys, BACKLOG],
        )
        cursor.execute("ANALYZE awa_job")


def lanes_at_the_end(queue: str) -> LaneCursors:
    lanes = LaneCursors()
    with connection.cursor() as cursor:
        cursor.execute(statements["find_lane_ends"], {"queue": queue})
        for priority, run_at, job_id in cursor.fetchall():
            lanes.move_to(priority, (run_at, job_id))
    return lanes


@pytest.mark.django_db(transaction=True)
def test_keyed_claim_and_discovery__buffers_per_claim_flat_from_10_to_10000_keys() -> None:
    touched: dict[int, dict[str, int]] = {}
    for keys in (10, 10_000):
        queue = f"{QUEUE}-{keys}"  # a queue each: no dead entries of the other run in the way
        backlog_over(queue, keys)
        claim = {
            "queue": queue,
            "grants": claim_grants({f"k{i}": 1 for i in range(GRANTS)}, {}),
            "deadline": None,
            "worker": "test:0",
        }
        lanes = lanes_at_the_end(queue)
        touched[keys] = {
            "claim_keyed_jobs": buffers_touched("claim_keyed_jobs", claim),
            "find_arrivals": buffers_touched("find_arrivals", {"queue": queue, "limit": 1000, **lanes.params()}),
            "count_running_keys": buffers_touched(
                "count_running_keys", {"queue": queue, "keys": [f"k{i}" for i in range(GRANTS)]}
            ),
        }
    for name in touched[10]:
        few, many = touched[10][name], touched[10_000][name]
        assert many <= few * 1.25 + 8, (name, touched)
