"""claim_jobs with lane cursors, against real Postgres, over random histories (hypothesis).

Jobs become available ahead of and behind the cursors (inserts with past run_at, promotion of
due scheduled jobs, retries, priority aging); claims run with the cursors LaneCursors hands out,
on a clock the test moves. Every claim must return exactly the first ``limit`` rows in (priority,
run_at, id) order among the due, available rows ahead of the cursors it was given (a rescan:
among all of them, the order the claim had before cursors), and in the end every job is claimed
exactly once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from awa_django.models import Job
from awa_django.sql import statements
from awa_django.worker.lanes import RESCAN_EVERY, LaneCursors

QUEUE = "lanes"

priorities = st.integers(min_value=1, max_value=4)
ages = st.integers(min_value=0, max_value=120)  # seconds before now
operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), priorities, ages, st.integers(min_value=1, max_value=4)),
        st.tuples(st.just("promote"), priorities, ages),
        st.tuples(st.just("retry"), st.integers(min_value=1, max_value=5)),
        st.tuples(st.just("age")),
        st.tuples(st.just("claim"), st.integers(min_value=1, max_value=6)),
        st.tuples(st.just("tick")),
    ),
    min_size=4,
    max_size=40,
)


def run(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statements[name], params)
        return list(cursor.fetchall()) if cursor.description else []


def available_ids() -> list[int]:
    return list(
        Job.objects.filter(state="available", queue=QUEUE, run_at__lte=timezone.now()).values_list("id", flat=True)
    )


def ahead(params: dict[str, Any]) -> list[tuple[int, Any, int]]:
    """(priority, run_at, id) of the due, available rows ahead of each lane's cursor, in order."""
    rows = Job.objects.filter(state="available", queue=QUEUE, run_at__lte=timezone.now()).values_list(
        "id", "priority", "run_at"
    )
    found = []
    for job_id, priority, run_at in rows:
        after_run_at, after_id = params["after_run_at"][priority - 1], params["after_id"][priority - 1]
        if after_run_at is None or (run_at, job_id) > (after_run_at, after_id):
            found.append((priority, run_at, job_id))
    return sorted(found)


def ahead_ids(params: dict[str, Any]) -> list[int]:
    return [job_id for _, _, job_id in ahead(params)]


def expected(params: dict[str, Any]) -> list[int]:
    """The oracle: the first `limit` due, available rows ahead of each lane's cursor, in order."""
    return ahead_ids(params)[: params["limit"]]


class History:
    def __init__(self) -> None:
        self.lanes = LaneCursors()
        self.now = 0.0
        self.claims: list[int] = []
        self.running: list[tuple[int, int]] = []  # (id, run_lease) claimed and not yet finalised
        self.since_rescan: set[int] = set()  # made available since the last rescan was issued

    def made_available(self, ids: list[int]) -> None:
        self.since_rescan.update(ids)

    def claim(self, limit: int) -> list[int]:
        params = {"queue": QUEUE, "limit": limit, "deadline": None, **self.lanes.params(self.now)}
        if params["lanes_rescan"]:
            self.since_rescan.clear()
        else:
            # Only a job made available since the last rescan may wait behind a cursor: whatever a
            # rescan saw behind is ahead of the cursors it left (moved back where needed).
            behind = set(available_ids()) - set(ahead_ids(params))
            assert behind <= self.since_rescan, f"left behind the cursors {params}: {behind - self.since_rescan}"
        want = expected(params)
        rows = run("claim_jobs", params)
        got = [row[0] for row in rows]
        # The set matters (RETURNING's order is the join's, not the claim order).
        assert sorted(got) == sorted(want), f"claim with {params} returned {got}, expected {want}"
        self.lanes.advance(rows, params, self.now)
        self.claims.extend(got)
        self.running.extend((row[0], row[6]) for row in rows)
        return got


def enqueue(priority: int, age: int, n: int = 1) -> list[int]:
    run_at = timezone.now() - timedelta(seconds=age)
    return [Job.objects.enqueue("noop", {}, queue=QUEUE, priority=priority, run_at=run_at).pk for _ in range(n)]


@pytest.mark.django_db(transaction=True)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=operations)
# Behind the cursor: three older jobs; the rescan takes two, the third must follow in order.
@example(history=[("insert", 2, 0, 2), ("claim", 1), ("insert", 2, 60, 3), ("tick",), ("claim", 2), ("claim", 1)])
# A rescan filled by lane 1 leaves lane 3's older job to the claims that reach lane 3 next.
@example(
    history=[
        ("insert", 3, 0, 1),
        ("claim", 1),
        ("insert", 3, 60, 1),
        ("insert", 1, 0, 2),
        ("tick",),
        ("claim", 2),
        ("claim", 1),
    ]
)
def test_claim__with_lane_cursors__claims_in_order_ahead_and_nothing_left_behind(
    history: list[tuple[Any, ...]],
) -> None:
    Job.objects.all().delete()
    h = History()
    for op in history:
        if op[0] == "insert":
            h.made_available(enqueue(op[1], op[2], op[3]))
        elif op[0] == "promote":  # a scheduled job that fell due (age seconds ago) and is promoted
            job = Job.objects.enqueue("noop", {}, queue=QUEUE, priority=op[1], run_at=timezone.now() + timedelta(1))
            Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - timedelta(seconds=op[2]))
            run("promote_due_jobs", {"limit": 1000})
            h.made_available([job.pk])
        elif op[0] == "retry":  # running attempts fail and are due again at once
            batch, h.running = h.running[: op[1]], h.running[op[1] :]
            if batch:
                run(
                    "finalize_jobs",
                    {
                        "ids": [i for i, _ in batch],
                        "leases": [lease for _, lease in batch],
                        "states": ["retryable"] * len(batch),
                        "delays": [0.0] * len(batch),
                        "errors": ['{"message": "retry"}'] * len(batch),
                        "refunds": [0] * len(batch),
                        "progress": [None] * len(batch),
                        "results": [None] * len(batch),
                    },
                )
                run("promote_due_jobs", {"limit": 1000})
                h.made_available([i for i, _ in batch])
        elif op[0] == "age":
            aged = run("age_priorities", {"queue": QUEUE, "aging": timedelta(seconds=30), "limit": 1000})
            h.made_available([row[0] for row in aged])
        elif op[0] == "claim":
            h.claim(op[1])
        else:
            h.now += RESCAN_EVERY
    # Drain: after every rescan that comes back empty nothing is left behind any cursor.
    for _ in range(500):
        h.now += RESCAN_EVERY
        if not h.claim(6) and not Job.objects.filter(state="available", queue=QUEUE).exists():
            break
    attempts = dict(Job.objects.filter(queue=QUEUE).values_list("id", "attempt"))
    assert Job.objects.filter(queue=QUEUE).exclude(state="running").count() == 0
    # Each attempt was claimed once: the claims of a job are as many as its attempts.
    counts: dict[int, int] = {}
    for job_id in h.claims:
        counts[job_id] = counts.get(job_id, 0) + 1
    assert counts == attempts
