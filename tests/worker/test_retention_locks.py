"""Retention's DDL never makes a completion wait (issue 43).

A partition's create or drop takes its branch's ACCESS EXCLUSIVE lock. A lock request that waits
sits at the head of the branch's lock queue, and every completion (an INSERT into the branch, ROW
EXCLUSIVE) queues behind it while it waits. So the retention asks with NOWAIT and tries again
later (``retention._exclusive``): while another session holds the branch (a console query, the
leader's rollup round), the drop keeps retrying, no lock request on the branch is ever left
waiting, completions go on, and the drop happens once the holder lets go.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from awa_django.models import Job, JobEdge, JobState
from awa_django.models import Workflow as WorkflowRow
from awa_django.worker import retention
from awa_django.worker.retention import floor_to
from tests.conftest import connection_params
from tests.harness import drop_range_partitions, make_config, run_on_worker_connection, wait_until


def waiting_locks(tables: list[str]) -> list[tuple[str, str, int]]:
    """Lock requests on ``tables`` not granted (yet): (table, mode, pid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relation::regclass::text, mode, pid FROM pg_locks"
            " WHERE NOT granted AND relation = ANY(%s::regclass[])",
            [tables],
        )
        return [tuple(row) for row in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_drop__branch_held_by_a_reader__retries_without_a_waiting_lock_completions_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drop_range_partitions()
    config = make_config(["default"], completed_retention=3600.0, failed_retention=3600.0)
    branch = retention.BRANCHES[0]
    old_lower = floor_to(datetime.now(UTC), timedelta(hours=1)) - timedelta(hours=3)

    async def old_partition(conn: Any) -> bool | None:
        return await retention._create(conn, branch, old_lower, old_lower + timedelta(hours=1))

    assert run_on_worker_connection(old_partition)
    old_name = retention.partition_name(branch, old_lower)
    Job.objects.create(kind="noop", state=JobState.COMPLETED, finalized_at=old_lower + timedelta(minutes=5))

    tries: list[int] = []

    def pause() -> float:  # each failed try for the locks pauses once
        tries.append(1)
        return 0.005

    monkeypatch.setattr(retention, "LOCK_TRIES", 100_000)  # it keeps trying until the reader lets go
    monkeypatch.setattr(retention, "_pause", pause)

    reader = psycopg.connect(**connection_params())
    dropped: list[list[str]] = []
    try:
        # A long reader of the branch: ACCESS SHARE on it and its partitions until it ends.
        reader.execute("SELECT count(*) FROM awa_job_done_completed")
        worker = threading.Thread(
            target=lambda: dropped.append(run_on_worker_connection(retention.drop_expired, config)), daemon=True
        )
        worker.start()
        seen_waiting: list[tuple[str, str, int]] = []
        completed: list[int] = []
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a completion queued behind the DDL fails here

        def retried_while_completing() -> bool:
            seen_waiting.extend(waiting_locks([branch.table, old_name]))
            completed.append(Job.objects.create(kind="noop", state=JobState.COMPLETED).pk)
            return len(tries) >= 20

        wait_until(retried_while_completing, timeout=60, what="twenty tries for the drop's locks")
        assert dropped == [], "dropped while the reader held the branch"
        reader.rollback()  # the reader lets go: the next try takes the locks
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        reader.close()
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")

    assert seen_waiting == []
    assert dropped == [[old_name]]
    assert Job.objects.filter(pk__in=completed, state=JobState.COMPLETED).count() == len(completed)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [old_name])
        assert cursor.fetchone()[0] is None


@pytest.mark.django_db(transaction=True)
def test_create__branch_held_the_whole_sweep__given_up_until_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    drop_range_partitions()
    config = make_config(["default"], completed_retention=3600.0, failed_retention=3600.0)
    monkeypatch.setattr(retention, "LOCK_TRIES", 3)
    monkeypatch.setattr(retention, "_pause", lambda: 0.0)
    with psycopg.connect(**connection_params()) as reader:
        reader.execute("SELECT count(*) FROM awa_job_done_failed")
        created = run_on_worker_connection(retention.ensure_partitions, config)
        assert created and all(name.startswith("awa_job_done_c_") for name in created)  # the free branch only
        reader.rollback()
    assert any(
        name.startswith("awa_job_done_f_") for name in run_on_worker_connection(retention.ensure_partitions, config)
    )


def test_prune__creates_and_drops_wait_while_a_rollup_round_holds_the_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's rollup round and its retention's DDL take turns (``Maintenance.storage_turn``):
    the round reads the branches, and a DDL trying meanwhile would only be refused."""
    events: list[str] = []

    async def ddl(conn: Any, config: Any) -> list[str]:
        events.append("ddl")
        return []

    async def rows(*args: Any) -> int:
        return 0

    monkeypatch.setattr(retention, "ensure_partitions", ddl)
    monkeypatch.setattr(retention, "drop_expired", ddl)
    monkeypatch.setattr(retention, "sweep", rows)
    monkeypatch.setattr(retention, "sweep_steps", rows)

    async def main() -> None:
        turn = asyncio.Lock()

        async def round_() -> None:
            async with turn:
                events.append("round begins")
                for _ in range(10):  # the round's statements: the loop runs other tasks meanwhile
                    await asyncio.sleep(0)
                events.append("round ends")

        rolling = asyncio.create_task(round_())
        await asyncio.sleep(0)  # the round has the turn
        await retention.prune(None, make_config(["default"]), turn=turn)  # type: ignore[arg-type]
        await rolling

    asyncio.run(main())
    assert events == ["round begins", "round ends", "ddl", "ddl"]


def _old_partition(branch: retention.Branch) -> tuple[str, datetime]:
    """A range partition of ``branch`` three hours old, past a one-hour retention; its name and lower bound."""
    lower = floor_to(datetime.now(UTC), timedelta(hours=1)) - timedelta(hours=3)

    async def create(conn: Any) -> bool | None:
        return await retention._create(conn, branch, lower, lower + timedelta(hours=1))

    assert run_on_worker_connection(create)
    return retention.partition_name(branch, lower), lower


@pytest.mark.django_db(transaction=True)
def test_drop__a_sibling_partition_busy__dropped_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the branch, its DEFAULT partition and the dropped one are locked (``ONLY``): a session
    holding another partition of the branch in autovacuum's mode (SHARE UPDATE EXCLUSIVE, which a
    NOWAIT request does not make yield) stops nothing."""
    drop_range_partitions()
    config = make_config(["default"], completed_retention=3600.0, failed_retention=3600.0)
    branch = retention.BRANCHES[0]
    run_on_worker_connection(retention.ensure_partitions, config)  # the current partitions
    old_name, _ = _old_partition(branch)
    width = retention.width_for(timedelta(seconds=config.completed_retention))
    current = retention.partition_name(branch, floor_to(datetime.now(UTC), width))  # made ahead if the width turned
    monkeypatch.setattr(retention, "LOCK_TRIES", 2)
    monkeypatch.setattr(retention, "_pause", lambda: 0.0)
    with psycopg.connect(**connection_params()) as vacuum_like:
        vacuum_like.execute(f'LOCK TABLE ONLY "{current}" IN SHARE UPDATE EXCLUSIVE MODE')  # a name from the catalog
        assert run_on_worker_connection(retention.drop_expired, config) == [old_name]
        vacuum_like.rollback()


@pytest.mark.django_db(transaction=True)
def test_drop__a_statement_after_the_locks_waits_in_vain__given_up_without_retrying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lock a statement of the drop waits for in vain (its workflow edges' rows, held by another
    session) ends the drop for this sweep at once: a retry would hold the branch again, with
    completions queued behind it, for another lock_timeout."""
    drop_range_partitions()
    config = make_config(["default"], completed_retention=3600.0, failed_retention=3600.0)
    branch = retention.BRANCHES[0]
    old_name, lower = _old_partition(branch)
    workflow = WorkflowRow.objects.create(name="old")
    up = Job.objects.create(kind="noop", state=JobState.COMPLETED, finalized_at=lower + timedelta(minutes=5))
    down = Job.objects.create(
        kind="noop", state=JobState.COMPLETED, workflow_id=workflow.pk, finalized_at=lower + timedelta(minutes=6)
    )
    JobEdge.objects.create(upstream_id=up.pk, downstream_id=down.pk, name="up")
    tries: list[int] = []

    def pause() -> float:
        tries.append(1)
        return 0.0

    monkeypatch.setattr(retention, "_pause", pause)
    with psycopg.connect(**connection_params()) as holder:
        holder.execute("SELECT 1 FROM awa_job_edge WHERE downstream_id = %s FOR UPDATE", [down.pk])
        assert run_on_worker_connection(retention.drop_expired, config) == []  # given up until the next sweep
        holder.rollback()
    assert tries == []  # not retried
    assert run_on_worker_connection(retention.drop_expired, config) == [old_name]
    assert not JobEdge.objects.filter(downstream_id=down.pk).exists()
