"""fire_schedule.sql: one statement inserts a slot's job and advances the schedule, guarded by a
compare-and-swap, so two leaders (failover, split brain) never fire one slot twice."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from awa_django.models import Job, Schedule
from awa_django.services.schedules import save_schedule
from awa_django.sql import statements
from awa_django.worker.db import connection_kwargs
from awa_django.worker.scheduler import Scheduler, fire_params, plan_fire, schedule_unique_key
from tests.conftest import connect_outside_django
from tests.harness import make_config, running_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def connection_params() -> dict[str, Any]:
    params = connection_kwargs("default")
    params.pop("autocommit", None)
    return params


def make_schedule(
    name: str = "every_minute", cron: str = "* * * * *", now: datetime | None = None, **kw: Any
) -> Schedule:
    """A schedule whose next fire is five minutes before ``now``'s minute (default: the clock's)."""
    first = (now or datetime.now(timezone.utc)).replace(second=0, microsecond=0) - timedelta(minutes=5)
    return Schedule.objects.create(name=name, kind="noop", cron=cron, next_fire_at=first, **kw)


def fire(
    conn: psycopg.Connection[Any],
    row: Schedule,
    missed: str = "coalesce",
    limit: int = 100,
    now: datetime | None = None,
) -> tuple[int, list[int]]:
    """Plan from the row as read at ``now`` (default: the clock's), then run the statement, as a
    leader does."""
    now = now or datetime.now(timezone.utc)
    assert row.next_fire_at is not None
    plan = plan_fire(row.name, row.cron, row.timezone, missed, limit, row.next_fire_at, now)
    result = conn.execute(
        statements["fire_schedule"], fire_params(row.pk, row.name, row.last_fire_at, row.next_fire_at, plan)
    ).fetchone()
    assert result is not None
    return int(result[0]), list(result[1])


def test_fire__inserts_the_job_with_its_slot_and_advances_the_schedule() -> None:
    row = make_schedule(args={"n": 1}, queue="reports", priority=3)
    with connect_outside_django() as conn:
        advanced, job_ids = fire(conn, row)
    assert advanced == 1 and len(job_ids) == 1
    job = Job.objects.get(pk=job_ids[0])
    fresh = Schedule.objects.get(pk=row.pk)
    assert fresh.last_fire_at is not None and fresh.next_fire_at == fresh.last_fire_at + timedelta(minutes=1)
    assert fresh.last_job_id == job.pk
    assert (job.kind, job.args, job.queue, job.priority, job.state) == ("noop", {"n": 1}, "reports", 3, "available")
    assert job.metadata == {"schedule": "every_minute", "fire_at": fresh.last_fire_at.isoformat()}
    assert job.unique_key == schedule_unique_key("every_minute", fresh.last_fire_at)


def test_fire__a_second_leader_with_the_same_read_fires_nothing() -> None:
    row = make_schedule()
    with connect_outside_django() as first, connect_outside_django() as second:
        assert fire(first, row)[0] == 1
        assert fire(second, row) == (0, [])  # the compare fails: last/next fire moved
    assert Job.objects.count() == 1


def test_fire__concurrent_leaders_block_on_the_row_and_only_one_fires() -> None:
    """Split brain: leader A has fired but not committed; leader B, with the same read, waits on
    the row lock, then sees the new row version, and inserts and advances nothing.

    One reading of the clock for the schedule and both plans: read twice, a minute that turned
    between the schedule's creation and A's plan made that plan seven slots."""
    now = datetime.now(timezone.utc)
    row = make_schedule(missed="catch_up", now=now)
    result: dict[str, Any] = {}
    with connect_outside_django() as a_conn, connect_outside_django() as b_conn, connect_outside_django() as probe:
        a_conn.autocommit = False
        a_advanced, a_jobs = fire(a_conn, row, missed="catch_up", now=now)
        assert a_advanced == 1 and len(a_jobs) == 6  # the five missed minutes and this one
        b_pid = b_conn.info.backend_pid

        def leader_b() -> None:
            result["b"] = fire(b_conn, row, missed="catch_up", now=now)

        thread = threading.Thread(target=leader_b)
        thread.start()
        wait_until(
            lambda: (
                probe.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (b_pid,)
                ).fetchone()
                == (True,)
            ),
            what="leader B waiting on the schedule row lock",
        )
        a_conn.commit()
        thread.join(30)
    assert result["b"] == (0, [])
    assert Job.objects.count() == 6
    assert len({j.metadata["fire_at"] for j in Job.objects.all()}) == 6


def test_fire__the_unique_key_still_guards_a_slot_when_the_schedule_is_rewound() -> None:
    row = make_schedule()
    with connect_outside_django() as conn:
        fire(conn, row)
        Schedule.objects.filter(pk=row.pk).update(last_fire_at=None, next_fire_at=row.next_fire_at)
        Job.objects.update(state="completed")  # even a finished job keeps its slot
        advanced, job_ids = fire(conn, row)
    assert advanced == 1 and job_ids == []
    assert Job.objects.count() == 1


@pytest.mark.parametrize("field", ["paused", "removed"])
def test_fire__a_paused_or_removed_schedule_does_not_fire(field: str) -> None:
    row = make_schedule()
    Schedule.objects.filter(pk=row.pk).update(
        **({"paused": True} if field == "paused" else {"removed_from_code_at": datetime.now(timezone.utc)})
    )
    with connect_outside_django() as conn:
        assert fire(conn, row) == (0, [])
    assert Job.objects.count() == 0


def test_scheduler__a_row_created_without_a_next_fire_gets_one_and_fires_nothing_yet() -> None:
    row = Schedule.objects.create(name="orm_made", kind="noop", cron="0 3 * * *")
    assert row.next_fire_at is None

    async def one_round() -> int:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            return await Scheduler().fire_due(conn)

    assert asyncio.run(one_round()) == 0
    row.refresh_from_db()
    assert row.next_fire_at is not None and (row.next_fire_at.hour, row.next_fire_at.minute) == (3, 0)
    assert row.next_fire_at > datetime.now(timezone.utc)
    assert Job.objects.count() == 0


def test_leader__a_due_schedule_it_cannot_fire_does_not_make_it_spin() -> None:
    """A row with an invalid cron (awa.E009: written around the admin form) stays due: the leader
    skips it every round. Its past next_fire_at must not count as "a schedule is due now", or the
    leader runs its whole round (fire, promote, rescue, aging) every 5 ms instead of every
    maintenance interval, for as long as the row stays broken."""
    Schedule.objects.create(
        name="broken", kind="noop", cron="0 25 * * *", next_fire_at=datetime.now(timezone.utc) - timedelta(hours=1)
    )
    config = make_config(["default"], maintenance_interval=0.5)
    with running_worker(config) as worker:
        wait_until(lambda: worker.maintenance.rounds >= 2, what="two leader rounds")
        assert worker.maintenance._round_delay() == config.maintenance_interval
        # Fixed in the admin: the leader reads the row again and fires it.
        row = Schedule.objects.get(name="broken")
        row.cron = "* * * * * *"
        save_schedule(row, changed=["cron"])
        wait_until(lambda: Job.objects.filter(metadata__schedule="broken").exists(), what="the fixed row fired")
