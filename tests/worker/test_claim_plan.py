"""The claim's plan on this server's PostgreSQL: each lane of claim_jobs reaches its rows through
the partial available index and locks only what it returns, on every PostgreSQL version we test.

The planner changes between major versions, and the claim runs every few milliseconds per queue,
so a plan that falls back to scanning awa_job would show first as latency and then as load.
.ci/run runs this file, with the lane-cursor buffer test of test_claim_lanes.py, on each server
of the Postgres matrix (15, 16 and 18): see the README's "Tested with".
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from awa_django.models import Job
from awa_django.sql import statements
from awa_django.worker.lanes import LaneCursors

QUEUE = "plan"
AVAILABLE_INDEX = "awa_job_available_idx"


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def claim_plan(params: dict[str, Any]) -> dict[str, Any]:
    """claim_jobs' plan, executed (ANALYZE) in a transaction that is rolled back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statements["claim_jobs"], params)
        plan: dict[str, Any] = cursor.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    return plan


@pytest.mark.django_db(transaction=True)
def test_claim_plan__every_lane_scans_the_available_index__no_sequential_scan_of_jobs() -> None:
    Job.objects.all().delete()
    past = timezone.now() - timedelta(seconds=10)
    # A table the planner must be selective on: the claimed queue's jobs in every lane, another
    # queue's backlog, and finished rows the partial index leaves out.
    Job.objects.enqueue_many(
        {"kind": "noop", "queue": QUEUE, "priority": 1 + i % 4, "run_at": past, "args": {"i": i}} for i in range(2000)
    )
    Job.objects.enqueue_many({"kind": "noop", "queue": "other", "run_at": past} for _ in range(2000))
    Job.objects.filter(queue="other").update(state="completed", finalized_at=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job")
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]

    plan = claim_plan({"queue": QUEUE, "limit": 32, "deadline": None, "worker": "test:1", **LaneCursors().params()})

    on_jobs = [n for n in nodes(plan) if n.get("Relation Name") == "awa_job"]
    shape = [(n["Node Type"], n.get("Index Name")) for n in on_jobs]
    assert not [n for n in on_jobs if n["Node Type"] == "Seq Scan"], (version, shape)
    # The lanes are the scans under the CTE ``picked``; the others on the available index are the
    # ``more`` probe's (is a due job left past each lane's last claimed row?).
    picked = next(n for n in nodes(plan) if n.get("Subplan Name") == "CTE picked")
    lanes = [n for n in nodes(picked) if n.get("Index Name") == AVAILABLE_INDEX]
    assert lanes, (version, shape)
    probes = [n for n in on_jobs if n.get("Index Name") == AVAILABLE_INDEX and n not in lanes]
    assert probes, (version, shape)
    # The probe stops at the first lane with a job left: lane 1 here, after its 32nd row.
    assert sum(n.get("Actual Loops", 1) for n in probes) == 1, (version, [n.get("Actual Loops") for n in probes])
    assert all(n["Actual Rows"] <= 1 for n in probes), (version, [n["Actual Rows"] for n in probes])
    # FOR UPDATE SKIP LOCKED under each lane's LIMIT: a lane locks at most what it hands on.
    locks = [n for n in nodes(plan) if n["Node Type"] == "LockRows"]
    assert locks, (version, shape)
    assert all(n["Actual Rows"] <= 32 for n in locks), [(n["Node Type"], n["Actual Rows"]) for n in locks]
    # The first lane fills the batch: the Append stops pulling, the later lanes are never run.
    assert plan["Actual Rows"] == 32, (version, plan["Actual Rows"])
    later = [n for n in lanes if n.get("Actual Loops", 1) == 0]
    assert len(later) == len(lanes) - 1, (version, [(n.get("Index Name"), n.get("Actual Loops")) for n in lanes])
