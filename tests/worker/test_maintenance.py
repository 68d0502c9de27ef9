"""The maintenance leader and the health snapshot: scheduled jobs are promoted when due, finished
jobs are deleted past their retention, waiting jobs gain priority, and each live worker keeps a
WorkerInstance row describing its capacity, removed when it stops."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from awa_django.defaults import QUEUE_DURATION_MAX
from awa_django.models import Job, JobState, Queue, WorkerInstance
from awa_django.registry import JobHandler, Registry
from awa_django.sql import statements
from awa_django.worker import JobContext, QueueConfig
from tests.factories import JobFactory
from tests.harness import drop_range_partitions, make_config, running_worker, wait_until
from tests.worker.support import Gates, gated_registry, wait_for_row


@pytest.mark.django_db(transaction=True)
def test_maintenance__scheduled_job__promoted_when_due_and_run_not_before() -> None:
    run_at = timezone.now() + timedelta(seconds=1)
    job = Job.objects.enqueue("noop", queue="later", run_at=run_at)
    assert job.state == JobState.SCHEDULED

    with running_worker(make_config(["later"])):
        done = wait_for_row(job.pk, state="completed")

    assert done.attempt == 1
    assert done.attempted_at is not None
    assert done.attempted_at >= run_at


@pytest.mark.django_db(transaction=True)
def test_maintenance__retention__deletes_finished_jobs_past_their_retention_only() -> None:
    drop_range_partitions()  # the leader makes them with this test's widths (a minute)
    now = timezone.now()

    def finished(state: str, age: timedelta) -> int:
        job: Job = JobFactory(kind="noop", queue="kept", state=state, attempt=1, finalized_at=now - age)
        return job.pk

    # Retention drops partitions whole (docs/storage.md): a job goes between its retention and its
    # retention plus the partition width (a minute for these retentions), swept or dropped.
    expired = {
        finished("completed", timedelta(hours=3)),
        finished("failed", timedelta(hours=5)),
        finished("cancelled", timedelta(hours=5)),
    }
    kept = {
        finished("completed", timedelta(minutes=10)),
        finished("failed", timedelta(hours=1)),  # past the completed retention, within the failed one
        finished("cancelled", timedelta(hours=1)),
    }
    waiting: Job = JobFactory(kind="noop", queue="kept", state="scheduled", run_at=now + timedelta(days=1))
    waiting.created_at = now - timedelta(days=30)
    waiting.save()

    config = make_config(["kept"], completed_retention=3600.0, failed_retention=7200.0)
    with running_worker(config):
        wait_until(lambda: not Job.objects.filter(pk__in=expired).exists(), what="expired jobs deleted")
        assert set(Job.objects.filter(pk__in=kept).values_list("pk", flat=True)) == kept

    assert Job.objects.filter(pk=waiting.pk, state="scheduled").exists()


@pytest.mark.django_db(transaction=True)
def test_maintenance__priority_aging__raises_one_level_per_interval_waited_down_to_1() -> None:
    aging = timedelta(seconds=60)
    Queue.objects.create(name="aging", paused=True, priority_aging=aging)
    Queue.objects.create(name="plain", paused=True)
    now = timezone.now()

    def waiting(queue: str, priority: int, waited: timedelta) -> Job:
        job: Job = JobFactory(kind="noop", queue=queue, priority=priority, run_at=now - waited)
        return job

    old = waiting("aging", 4, timedelta(seconds=130))  # two intervals: 4 → 3 → 2
    ancient = waiting("aging", 2, timedelta(seconds=1000))  # stops at the top level, 1
    fresh = waiting("aging", 4, timedelta(seconds=30))  # not yet one interval
    elsewhere = waiting("plain", 4, timedelta(seconds=1000))  # its queue does not age

    queues = {
        "aging": QueueConfig("aging", paused=True, priority_aging=60.0),
        "plain": QueueConfig("plain", paused=True),
    }
    with running_worker(make_config(queues)):
        aged = wait_for_row(old.pk, priority=2)
        topped = wait_for_row(ancient.pk, priority=1)

    # Each step moves run_at on by the interval, so the job waits a full interval for the next.
    assert aged.run_at == old.run_at + 2 * aging
    assert topped.run_at >= ancient.run_at + aging
    assert Job.objects.get(pk=fresh.pk).priority == 4
    assert Job.objects.get(pk=elsewhere.pk).priority == 4
    assert set(Job.objects.values_list("state", flat=True)) == {"available"}


@pytest.mark.django_db(transaction=True)
def test_snapshot__hard_reserved_worker__reports_capacity_in_flight_and_available_then_removed_on_stop(
    gates: Gates,
) -> None:
    async def hold(context: JobContext) -> None:
        await gates.wait(context.job_id)

    registry = Registry()
    registry.register(JobHandler("hold", hold, queue="snap", takes_context=True))
    queues = {"snap": QueueConfig("snap", max_workers=7), "idle": QueueConfig("idle", max_workers=3)}
    job = Job.objects.enqueue("hold", queue="snap")

    with running_worker(make_config(queues), registry=registry) as worker:

        def snapshot_with_job_in_flight() -> WorkerInstance | None:
            row = WorkerInstance.objects.filter(instance_id=worker.instance_id).first()
            return row if row is not None and row.queues.get("snap", {}).get("in_flight") == 1 else None

        snapshot = wait_until(snapshot_with_job_in_flight, what="a snapshot showing the running job")
        assert snapshot.mode == "hard_reserved"
        assert snapshot.global_max_workers is None
        assert snapshot.pid == os.getpid()
        assert snapshot.hostname == worker.hostname
        snap, idle = snapshot.queues["snap"], snapshot.queues["idle"]
        assert snap["capacity"] == {"type": "HardReserved", "max_workers": 7}
        assert (snap["in_flight"], snap["available"]) == (1, 6)
        assert idle["capacity"] == {"type": "HardReserved", "max_workers": 3}
        assert (idle["in_flight"], idle["available"]) == (0, 3)
        assert snapshot.flags["in_flight"] == 1

        gates.open(job.pk)
        wait_for_row(job.pk, state="completed")

    assert not WorkerInstance.objects.filter(instance_id=worker.instance_id).exists()


@pytest.mark.django_db(transaction=True)
def test_snapshot__weighted_worker__reports_min_workers_weight_and_overflow() -> None:
    queues = {"w": QueueConfig("w", min_workers=2, weight=3), "v": QueueConfig("v", min_workers=1, weight=1)}

    with running_worker(make_config(queues, global_max_workers=10)) as worker:

        def idle_snapshot() -> WorkerInstance | None:
            # Mid-poll, both queues contend and each sees only its weighted share of the pool; an
            # idle worker's snapshot offers each queue the whole pool on top of its own slots.
            row = WorkerInstance.objects.filter(instance_id=worker.instance_id).first()
            return row if row is not None and row.queues.get("w", {}).get("available") == 9 else None

        snapshot = wait_until(idle_snapshot, what="a snapshot of the idle worker")

    assert snapshot.mode == "weighted"
    assert snapshot.global_max_workers == 10
    assert snapshot.queues["w"]["capacity"] == {"type": "Weighted", "min_workers": 2, "weight": 3, "overflow_held": 0}
    assert snapshot.queues["v"]["capacity"] == {"type": "Weighted", "min_workers": 1, "weight": 1, "overflow_held": 0}
    assert (snapshot.queues["w"]["in_flight"], snapshot.queues["w"]["available"]) == (0, 2 + 7)
    assert (snapshot.queues["v"]["in_flight"], snapshot.queues["v"]["available"]) == (0, 1 + 7)
    assert not WorkerInstance.objects.filter(instance_id=worker.instance_id).exists()


@pytest.mark.django_db(transaction=True)
def test_queue_durations_over_a_year__capped_as_read__the_claim_runs() -> None:
    """A Queue row written past the admin's check (the ORM, SQL) with a deadline or an aging of a
    million days: now() plus or minus it leaves Postgres's timestamps (the claim failed and stopped
    the worker). The worker reads both capped at a year, and its claim with the deadline runs."""
    huge = timedelta(days=1_000_000)
    Queue.objects.create(name="huge", deadline=huge, priority_aging=huge)
    with connection.cursor() as cursor:
        cursor.execute(statements["read_queues"])
        columns = [column.name for column in cursor.description]
        rows = [dict(zip(columns, values, strict=True)) for values in cursor.fetchall()]
    [row] = [r for r in rows if r["name"] == "huge"]
    config = QueueConfig.from_row(row)
    assert config.deadline == config.priority_aging == QUEUE_DURATION_MAX

    job = Job.objects.enqueue("noop", queue="huge")
    with running_worker(make_config({"huge": config})):
        done = wait_for_row(job.pk, state="completed")
    assert done.attempt == 1


@pytest.mark.django_db(transaction=True)
def test_rescue__a_live_worker_with_a_longer_heartbeat_than_the_leaders_staleness_keeps_its_job() -> None:
    """Workers may run with their own --heartbeat-interval/--heartbeat-staleness (a rolling deploy
    that raised HEARTBEAT_INTERVAL; one worker tuned by hand): each is valid on its own. The leader
    rescues with *its* staleness, so a live worker heartbeating every 3 s under a leader whose
    staleness is 1 s has its running job rescued between two heartbeats and run again (attempt 2)
    while attempt 1 still runs: a duplicate execution of a job nobody crashed."""
    gates, started = Gates(), list[int]()
    leader_config = make_config(["elsewhere"], heartbeat_interval=0.5, heartbeat_staleness=1.0)
    slow_config = make_config(["slow"], heartbeat_interval=3.0, heartbeat_staleness=10.0)
    with running_worker(leader_config) as leader:
        wait_until(lambda: leader.maintenance.is_leader, what="the first worker leading")
        with running_worker(slow_config, registry=gated_registry(gates, started, "slow")) as slow:
            assert not slow.maintenance.is_leader
            job = Job.objects.enqueue("gated", queue="slow")
            claimed = wait_for_row(job.pk, state="running")
            beats: list[object] = [claimed.heartbeat_at]

            def two_heartbeats_or_a_rescue() -> bool:
                now = Job.objects.get(pk=job.pk)
                if (
                    now.heartbeat_at is not None
                    and now.heartbeat_at != beats[-1]
                    and now.run_lease == claimed.run_lease
                ):
                    beats.append(now.heartbeat_at)
                return len(beats) >= 3 or now.run_lease != claimed.run_lease

            wait_until(two_heartbeats_or_a_rescue, what="two heartbeats of attempt 1, or its rescue")
            after = Job.objects.get(pk=job.pk)
            gates.open_all()
            assert (after.run_lease, after.errors) == (claimed.run_lease, []), after.errors
            assert started == [job.pk]
