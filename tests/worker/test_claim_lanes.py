"""claim_jobs with lane cursors, against real Postgres, over random histories (hypothesis).

Jobs become available ahead of and behind the cursors (inserts with past run_at, promotion of
due scheduled jobs, retries, priority aging); claims run with the cursors LaneCursors hands out,
and the look-behind (find_jobs_behind, whose findings rewind lanes) runs when the history says.
Every claim must return exactly the first ``limit`` rows in (priority, run_at, id) order among the
due, available rows ahead of the cursors it was given, and say (``more``) whether any is left;
after a look, nothing that was available then stays behind the cursors of the claims that follow;
and in the end every job is claimed exactly once.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from awa_django.models import Job, Queue
from awa_django.sql import statements
from awa_django.worker.lanes import LaneCursors

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
        st.tuples(st.just("look")),
    ),
    min_size=4,
    max_size=40,
)


def run(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statements[name], params)
        return list(cursor.fetchall()) if cursor.description else []


def claimed_rows(rows: list[tuple[Any, ...]]) -> list[SimpleNamespace]:
    """What the lane cursors read of claim_jobs rows (id, priority, run_at), by name."""
    return [SimpleNamespace(id=row[0], priority=row[7], run_at=row[9]) for row in rows]


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
        self.claims: list[int] = []
        self.running: list[tuple[int, int]] = []  # (id, run_lease) claimed and not yet finalised
        self.since_look: set[int] = set()  # made available since the last look-behind

    def made_available(self, ids: list[int]) -> None:
        self.since_look.update(ids)

    def look(self, window: float | None = None) -> list[int]:
        """The look-behind, as worker/lookbehind.py runs it, for this one queue (a full look, or a
        window look over the ``window`` seconds before each cursor); returns the ids it found."""
        looking = self.lanes.looking()
        rows = run(
            "find_jobs_behind",
            {
                "queues": [QUEUE] * len(looking),
                "lanes": [priority for priority, _ in looking],
                "before_run_at": [key[0] for _, key in looking],
                "before_id": [key[1] for _, key in looking],
                "window": None if window is None else timedelta(seconds=window),
            },
        )
        for _, priority, run_at, job_id in rows:
            self.lanes.found_behind(priority, (run_at, job_id))
        if window is None:
            self.since_look.clear()
        return [row[3] for row in rows]

    def claim(self, limit: int) -> list[int]:
        params = {"queue": QUEUE, "limit": limit, "deadline": None, "worker": "test:1", **self.lanes.params()}
        # Only a job made available since the last look may wait behind a cursor: whatever a look
        # saw behind is ahead of the cursors the claims after it use (rewound where needed).
        behind = set(available_ids()) - set(ahead_ids(params))
        assert behind <= self.since_look, f"left behind the cursors {params}: {behind - self.since_look}"
        want = expected(params)
        left = len(ahead_ids(params)) > limit
        # A hard-reserved worker's claim (claim_jobs without its probe), undone: the same rows.
        with transaction.atomic():
            unprobed = run("claim_jobs_unprobed", params)
            transaction.set_rollback(True)
        rows = run("claim_jobs", params)
        got = [row[0] for row in rows]

        def same(row: tuple[Any, ...]) -> tuple[Any, ...]:  # but `waited` (now() - run_at) and `more`
            return row[:10] + row[11:-1]

        assert sorted(map(same, unprobed)) == sorted(map(same, rows))
        assert all(row[-1] is None for row in unprobed)  # its `more`: unknown
        # The set matters (RETURNING's order is the join's, not the claim order).
        assert sorted(got) == sorted(want), f"claim with {params} returned {got}, expected {want}"
        # Each row's last column, ``more``: a due job is left ahead of the cursors once this claim's
        # rows are taken (the runner then keeps asking; without one it stands down at once).
        assert all(row[-1] is left for row in rows), f"claim with {params}: more={rows[0][-1]}, jobs left={left}"
        self.lanes.advance(claimed_rows(rows), params)
        self.claims.extend(got)
        self.running.extend((row[0], row[6]) for row in rows)
        return got


def enqueue(priority: int, age: int, n: int = 1) -> list[int]:
    run_at = timezone.now() - timedelta(seconds=age)
    return [Job.objects.enqueue("noop", {}, queue=QUEUE, priority=priority, run_at=run_at).pk for _ in range(n)]


@pytest.mark.django_db(transaction=True)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=operations)
# Behind the cursor: three older jobs; the rewinding claim takes two, the third must follow in order.
@example(history=[("insert", 2, 0, 2), ("claim", 1), ("insert", 2, 60, 3), ("look",), ("claim", 2), ("claim", 1)])
# A rewinding claim filled by lane 1 leaves lane 3's older job to the claims that reach lane 3 next.
@example(
    history=[
        ("insert", 3, 0, 1),
        ("claim", 1),
        ("insert", 3, 60, 1),
        ("insert", 1, 0, 2),
        ("look",),
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
            h.look()
    # Drain: look, then claim, until nothing is available.
    for _ in range(500):
        h.look()
        if not h.claim(6) and not Job.objects.filter(state="available", queue=QUEUE).exists():
            break
    attempts = dict(Job.objects.filter(queue=QUEUE).values_list("id", "attempt"))
    assert Job.objects.filter(queue=QUEUE).exclude(state="running").count() == 0
    # Each attempt was claimed once: the claims of a job are as many as its attempts.
    counts: dict[int, int] = {}
    for job_id in h.claims:
        counts[job_id] = counts.get(job_id, 0) + 1
    assert counts == attempts


def probe_params(lanes: LaneCursors) -> dict[str, list[Any]]:
    """find_ready_queues' parameters for this one queue, with its lanes' cursors, as the backlog
    probe (worker/listener.py) builds them."""
    cursors = lanes.cursors()
    return {
        "queues": [QUEUE] * len(cursors),
        "lanes": list(range(1, len(cursors) + 1)),
        "after_run_at": [None if key is None else key[0] for key in cursors],
        "after_id": [None if key is None else key[1] for key in cursors],
    }


def ready(lanes: LaneCursors) -> bool:
    """find_ready_queues for this one queue, as the backlog probe asks."""
    return [row[0] for row in run("find_ready_queues", probe_params(lanes))] == [QUEUE]


@pytest.mark.django_db(transaction=True)
def test_backlog_probe__sees_jobs_ahead_of_the_cursors__the_look_behind_those_behind() -> None:
    Job.objects.all().delete()
    h = History()
    assert not ready(h.lanes)
    h.made_available(enqueue(2, 0, 2))
    assert ready(h.lanes)  # no cursor yet: from the lane's front
    h.claim(2)
    assert not ready(h.lanes)
    (behind,) = enqueue(2, 60)  # a minute-old run_at: behind lane 2's cursor
    h.made_available([behind])
    assert not ready(h.lanes)  # not the probe's: it starts past the cursors
    h.made_available(enqueue(3, 60))  # lane 3 has no cursor: its front
    assert ready(h.lanes)
    h.claim(1)
    h.look()
    assert h.claim(1) == [behind]


@pytest.mark.django_db(transaction=True)
def test_window_look__finds_a_job_just_behind_the_cursor__the_full_look_one_far_behind() -> None:
    Job.objects.all().delete()
    h = History()
    h.made_available(enqueue(2, 0, 2))
    h.claim(2)
    (late,) = enqueue(2, 1)  # an insert that committed a second after later jobs were claimed
    (old,) = enqueue(2, 90)  # a job due long ago (e.g. an explicit past run_at)
    h.made_available([late, old])
    assert h.look(window=2.0) == [late]
    assert h.claim(5) == [late]
    assert h.look(window=2.0) == []
    assert h.look() == [old]
    assert h.claim(5) == [old]


@pytest.mark.django_db(transaction=True)
def test_paused_queue__claims_nothing_from_any_lane_until_resumed() -> None:
    """The pause is a one-time filter above the lanes' Append: checked before any lane is scanned
    (and any row locked), whatever lies in which lane."""
    Job.objects.all().delete()
    queue = Queue.objects.create(name=QUEUE, paused=True)
    ids = [job_id for priority in (4, 1, 3, 2) for job_id in enqueue(priority, 5, 2)]
    h = History()
    h.made_available(ids)
    params = {"queue": QUEUE, "limit": 10, "deadline": None, "worker": "test:1", **h.lanes.params()}
    assert run("claim_jobs", params) == []
    assert sorted(available_ids()) == sorted(ids)
    queue.paused = False
    queue.save()
    assert sorted(h.claim(10)) == sorted(ids)  # History.claim checks the order against the oracle


def buffers_touched(name: str, params: dict[str, Any]) -> int:
    """Shared buffers (hit or read) one execution of a statement touched, by EXPLAIN ANALYZE, in a
    transaction rolled back (claim_jobs writes)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statements[name], params)
        plan = cursor.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


@pytest.mark.django_db(transaction=True)
def test_old_snapshot__claim_and_backlog_probe_touch_only_what_lies_past_the_cursor() -> None:
    """While a snapshot older than every claim is held, each claimed job leaves a dead entry in the
    available index that nothing can remove. The next claim and the backlog probe must start past
    them (their cost may not grow with the jobs claimed), whatever plan the statistics suggest: an
    ANALYZE after the claims says the index is nearly empty, which once turned the probe's EXISTS
    into a hash semi-join over all of it (over a hundred buffers here; the bound is 30)."""
    Job.objects.all().delete()
    run_at = timezone.now() - timedelta(seconds=10)
    Job.objects.enqueue_many(
        {"kind": "noop", "args": {"i": i}, "queue": QUEUE, "priority": 2, "run_at": run_at} for i in range(5000)
    )
    old = psycopg.connect(**connection.get_connection_params())
    try:
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT count(*) FROM awa_job").fetchone()  # the snapshot: from before every claim
        lanes = LaneCursors()
        claimed = 0
        while True:
            params = {"queue": QUEUE, "limit": 250, "deadline": None, "worker": "test:1", **lanes.params()}
            rows = run("claim_jobs", params)
            lanes.advance(claimed_rows(rows), params)
            claimed += len(rows)
            if not rows:
                break
        assert claimed == 5000
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE awa_job")
        assert not ready(lanes)
        touched = {
            "find_ready_queues": buffers_touched("find_ready_queues", probe_params(lanes)),
            "claim_jobs": buffers_touched(
                "claim_jobs", {"queue": QUEUE, "limit": 32, "deadline": None, "worker": "test:1", **lanes.params()}
            ),
        }
        assert old.execute("SELECT count(*) FROM awa_job").fetchone() == (5000,)  # still the old snapshot
    finally:
        old.close()
    assert all(n <= 30 for n in touched.values()), touched
