"""What durable jobs cost the rest: parked jobs in no claim (a buffers test, as the lane-cursor
one), and their records deleted with their jobs by a bounded sweep."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from awa_django.models import Job, JobEvent, JobStep
from awa_django.sql import statements
from awa_django.worker.lanes import LaneCursors
from awa_django.worker.retention import StepCursor, sweep_steps
from tests.conftest import connection_params

QUEUE = "durable-costs"
PARKED = 100_000
AVAILABLE = 10


def buffers_touched(name: str, params: dict[str, Any]) -> int:
    """Shared buffers (hit or read) one execution of a statement touched, by EXPLAIN ANALYZE, in a
    transaction rolled back (the statements write)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statements[name], params)
        plan = cursor.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def plan_nodes(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of the statement's executed plan (EXPLAIN ANALYZE, rolled back)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statements[name], params)
        plan = cursor.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    nodes, todo = [], [plan]
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo.extend(node.get("Plans", []))
    return nodes


def job_reads(name: str, params: dict[str, Any]) -> tuple[int, int]:
    """(rows of awa_job the statement's scans read, buffers those scans touched), from its plan."""
    rows = buffers = 0
    for node in plan_nodes(name, params):
        if node.get("Relation Name") == "awa_job" and "Scan" in node["Node Type"]:
            loops = node.get("Actual Loops", 1)
            rows += (
                node["Actual Rows"] * loops
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            )
            buffers += node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
    return rows, buffers


def claim_reads() -> dict[str, tuple[int, int]]:
    lanes = LaneCursors()
    cursors = lanes.cursors()
    return {
        "claim_jobs": job_reads(
            "claim_jobs", {"queue": QUEUE, "limit": 32, "deadline": None, "worker": "test:1", **lanes.params()}
        ),
        "find_ready_queues": job_reads(
            "find_ready_queues",
            {
                "queues": [QUEUE] * len(cursors),
                "lanes": list(range(1, len(cursors) + 1)),
                "after_run_at": [None] * len(cursors),
                "after_id": [None] * len(cursors),
            },
        ),
        "promote_due_jobs": job_reads("promote_due_jobs", {"limit": 1000}),
    }


@pytest.mark.django_db(transaction=True)
def test_parked_jobs__100k_sleeping_and_waiting__cost_nothing_per_claim() -> None:
    """100,000 parked jobs (half sleeping: scheduled a day ahead; half waiting for an event) and
    10 available ones: the claim, the backlog probe and the promotion read no parked row (their
    scans of awa_job read the available rows at most, in a few dozen buffers): parked jobs are in
    no claim index, and promotion reads only due rows."""
    Job.objects.all().delete()
    with connection.cursor() as cursor:
        # Start from a clean claim index: a rolled-back test before this one (the signal cost test
        # parks 10,000 jobs in a transaction it rolls back) leaves its index entries until a vacuum,
        # and the claim's index scan walks them (366 buffers, found by CI's run), which is the cost
        # of dead entries, not of parked rows.
        cursor.execute("VACUUM awa_job")
    now = timezone.now()
    Job.objects.enqueue_many({"kind": "noop", "args": {"i": i}, "queue": QUEUE} for i in range(AVAILABLE))
    Job.objects.enqueue_many(
        {"kind": "noop", "args": {"i": i}, "queue": QUEUE, "run_at": now + timedelta(days=1)} for i in range(PARKED)
    )
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa_job SET state = 'waiting' WHERE state = 'scheduled' AND id % 2 = 0")
        cursor.execute("ANALYZE awa_job")
        cursor.execute("SELECT state, count(*) FROM awa_job GROUP BY state ORDER BY state")
        assert cursor.fetchall() == [("available", AVAILABLE), ("scheduled", PARKED // 2), ("waiting", PARKED // 2)]
    try:
        reads = claim_reads()
    finally:
        # The statistics of 100,000 parked rows outlive the flush (TRUNCATE keeps pg_statistic):
        # left here, they steer the plans of later tests on this database (an admin plan test read
        # a bitmap scan and a sort after this one). An ANALYZE of the emptied table resets them.
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM awa_job")
            cursor.execute("ANALYZE awa_job")
    # Each available job read at most twice (the claim selects, then updates it); not one parked.
    assert all(rows <= 2 * AVAILABLE and buffers <= 40 for rows, buffers in reads.values()), reads


async def _sweep(cursor: StepCursor, batches: int, batch: int) -> int:
    async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
        return await sweep_steps(conn, cursor, batches=batches, batch=batch)


@pytest.mark.django_db(transaction=True)
def test_sweep_steps__deletes_records_of_gone_jobs__keeps_live_and_finished_ones() -> None:
    live = Job.objects.enqueue("noop", {}, queue=QUEUE)
    finished = Job.objects.enqueue("noop", {}, queue=QUEUE)
    Job.objects.filter(id=finished.id).update(state="completed", finalized_at=timezone.now())
    assert Job.objects.get(id=finished.id).state == "completed"
    gone = list(range(10_000_000, 10_000_025))  # ids of jobs retention deleted
    for job_id in [live.id, finished.id, *gone]:
        JobStep.objects.create(job_id=job_id, name="a", attempt=1, result=1)
        JobStep.objects.create(job_id=job_id, name="b", attempt=1, result=2)
        JobEvent.objects.create(job_id=job_id, event="go")
    cursor = StepCursor()
    # Batches of 4 job ids, 3 statements per sweep: the walk needs several sweeps, and goes on
    # from where the last one stopped.
    deleted = 0
    sweeps = 0
    while True:
        deleted += asyncio.run(_sweep(cursor, batches=3, batch=4))
        sweeps += 1
        if cursor.after == 0:
            break
        assert sweeps < 10
    assert sweeps >= 2
    assert deleted == len(gone) * 3
    steps = set(JobStep.objects.values_list("job_id", flat=True))
    events = set(JobEvent.objects.values_list("job_id", flat=True))
    assert steps == events == {live.id, finished.id}


@pytest.mark.django_db(transaction=True)
def test_sweep_steps__probes_the_history_by_index__never_scans_a_partition() -> None:
    """With 20,000 finished jobs in awa_job_done and 5,000 waiting in awa_job, the sweep's statement
    reads no table whole: no sequential scan of awa_job or of any awa_job_done partition in its
    executed plan, and both are probed by index.

    awa_job keeps live rows, as in production: the planner may (and under autovacuum's timing did)
    scan a table it believes empty instead of probing it, which proves nothing about the sweep."""
    Job.objects.all().delete()
    Job.objects.enqueue_many({"kind": "noop", "args": {"i": i}, "queue": QUEUE} for i in range(25_000))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job SET state = 'completed', finalized_at = now() "
            "WHERE id IN (SELECT id FROM awa_job ORDER BY id LIMIT 20000)"
        )
        cursor.execute("SELECT count(*) FROM awa_job_done")
        assert cursor.fetchone() == (20_000,)
        cursor.execute("VACUUM ANALYZE awa_job")
        cursor.execute("ANALYZE awa_job_done")
    ids = list(Job.objects.order_by("id").values_list("id", flat=True)[:500])
    JobStep.objects.bulk_create(JobStep(job_id=job_id, name="a", attempt=1) for job_id in ids)
    JobStep.objects.bulk_create(JobStep(job_id=20_000_000 + i, name="a", attempt=1) for i in range(500))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job_step")
    nodes = plan_nodes("delete_orphan_steps", {"after": 0, "limit": 1000})
    # A sequential scan of an empty partition (one per probe, reading nothing) is how the planner
    # probes one; no scan may read a row of the job tables.
    scanned = [
        (node["Relation Name"], node["Actual Rows"], node.get("Rows Removed by Filter", 0))
        for node in nodes
        if node["Node Type"] == "Seq Scan"
        and node["Relation Name"] not in ("awa_job_step", "awa_job_event")
        and (node["Actual Rows"] or node.get("Rows Removed by Filter", 0))
    ]
    assert scanned == [], scanned
    probed = {node["Relation Name"] for node in nodes if node["Node Type"] in ("Index Scan", "Index Only Scan")}
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM awa_job_done LIMIT 1")
        (partition,) = cursor.fetchone()
    assert partition in probed and "awa_job" in probed, probed


WAITING = 10_000


def _park_waiting(count: int) -> list[int]:
    """``count`` jobs parked in a wait for "go" (state waiting, a wait record in force), as the
    writer leaves them; returns their ids."""
    Job.objects.enqueue_many({"kind": "noop", "args": {"i": i}, "queue": QUEUE} for i in range(count))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa_job SET state = 'waiting' WHERE queue = %s RETURNING id", [QUEUE])
        ids = sorted(row[0] for row in cursor.fetchall())
        cursor.execute(
            "INSERT INTO awa_job_step (job_id, name, kind, attempt, event) "
            "SELECT id, 'wait:go#1', 'wait', 1, 'go' FROM awa_job WHERE queue = %s",
            [QUEUE],
        )
        cursor.execute("ANALYZE awa_job")
        cursor.execute("ANALYZE awa_job_step")
    return ids


def _signal_cost(job_id: int) -> tuple[int, int]:
    """(statements one signal ran, shared buffers its wake statement touched)."""
    from django.test.utils import CaptureQueriesContext

    params = {"id": job_id, "event": "go", "payload": None}
    buffers = min(buffers_touched("signal_job", params) for _ in range(3))  # warm: no first-use catalog reads
    with CaptureQueriesContext(connection) as queries:
        assert Job.objects.signal(job_id, "go", None).woke
    statements_run = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    return len(statements_run), buffers


@pytest.mark.django_db
def test_signal__waking_one_of_10000_parked_jobs__costs_what_waking_one_of_ten_does() -> None:
    """A signal is two statements whatever the number of parked jobs (lock the job's row, then keep
    the event and wake the job), each by primary key: waking one of 10,000 parked jobs touches a
    few dozen buffers at most, as waking one of ten does."""
    few = _park_waiting(10)
    few_cost = _signal_cost(few[3])
    Job.objects.filter(queue=QUEUE).delete()
    JobStep.objects.all().delete()
    JobEvent.objects.all().delete()
    many = _park_waiting(WAITING)
    many_cost = _signal_cost(many[WAITING // 2])
    assert few_cost[0] == many_cost[0] == 2, (few_cost, many_cost)
    # Index probes only: about 20 buffers here (the job's row and index, the step's, the event's
    # insert); a scan of the 10,000 wait records would touch hundreds.
    assert many_cost[1] <= 40, (few_cost, many_cost)
