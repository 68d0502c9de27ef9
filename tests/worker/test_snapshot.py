"""One snapshot schema: what a real worker writes into its WorkerInstance row is what the admin's
dashboard, ``awa_health`` and ``services.stats.queue_stats`` read back, through the same dataclasses
(``awa_django.snapshot``)."""

from __future__ import annotations

import io
import json
import logging
import signal
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from awa_django.concurrency import HardReserved, Weighted
from awa_django.models import Job, Queue, WorkerInstance
from awa_django.services.cluster import QueueCapacity, capacities_by_queue
from awa_django.services.stats import queue_stats
from awa_django.snapshot import QueueSnapshot, SnapshotFormatError, WorkerFlags, queues_from_json
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.weighted.support import BLOCK_KIND, Recorder, enqueue
from tests.worker.support import Spawner

WEIGHTED = QueueSnapshot("weighted", Weighted(min_workers=2, weight=3, overflow_held=4), 6, 1, False, 5)
HARD = QueueSnapshot("hard_reserved", HardReserved(max_workers=7), 0, 7, True, None)


@pytest.mark.parametrize("snapshot", [WEIGHTED, HARD], ids=["weighted", "hard_reserved"])
def test_queue_snapshot__round_trips_through_json_text(snapshot: QueueSnapshot) -> None:
    assert QueueSnapshot.from_json(json.loads(json.dumps(snapshot.to_json()))) == snapshot


def test_queue_snapshot__writes_the_capacity_once_tagged_with_its_type() -> None:
    assert WEIGHTED.to_json() == {
        "mode": "weighted",
        "capacity": {"type": "Weighted", "min_workers": 2, "weight": 3, "overflow_held": 4},
        "in_flight": 6,
        "available": 1,
        "paused": False,
        "jobs_available": 5,
    }


def test_queue_snapshot__ignores_keys_it_does_not_know() -> None:
    # A worker of an earlier version also wrote the capacity's fields flat beside the entry.
    entry = WEIGHTED.to_json() | {"min_workers": 2, "weight": 3, "overflow_held": 4, "something_new": [1]}
    assert QueueSnapshot.from_json(entry) == WEIGHTED


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mode": "fast"}, "'mode' must be 'hard_reserved' or 'weighted', got 'fast'"),
        ({"in_flight": "6"}, "'in_flight' must be an integer, got '6'"),
        ({"available": True}, "'available' must be an integer, got True"),
        ({"paused": "no"}, "'paused' must be true or false, got 'no'"),
        ({"capacity": {"type": "Elastic"}}, "'type' must be one of ['HardReserved', 'Weighted'], got 'Elastic'"),
        ({"capacity": {"type": "Weighted", "min_workers": 2, "weight": 3}}, "'overflow_held' must be an integer"),
        ({"capacity": None}, "capacity must be a JSON object, got None"),
    ],
)
def test_queue_snapshot__from_json_names_the_bad_key_and_value(change: dict[str, Any], named: str) -> None:
    with pytest.raises(SnapshotFormatError) as caught:
        QueueSnapshot.from_json(WEIGHTED.to_json() | change, "queue 'emails'")
    assert named in str(caught.value)
    assert str(caught.value).startswith("queue 'emails'")


def test_queues_from_json__a_value_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(SnapshotFormatError, match=r"worker snapshot queue 'x' must be a JSON object, got 3"):
        queues_from_json({"x": 3})


@pytest.mark.parametrize(
    "flags",
    [
        WorkerFlags(True, False, False, 3, 1, "process", 0),
        WorkerFlags(False, True, True, 0, 0, "cluster", 2, cluster_caps={"A": 4}, cluster_leased=True),
    ],
    ids=["process", "cluster"],
)
def test_worker_flags__round_trip_through_json_text(flags: WorkerFlags) -> None:
    assert WorkerFlags.from_json(json.loads(json.dumps(flags.to_json()))) == flags


def test_worker_flags__cluster_keys_only_in_cluster_scope() -> None:
    assert "cluster_caps" not in WorkerFlags(True, False, False, 0, 0, "process").to_json()


def _row(instance_id: uuid.UUID | None, queue: str, in_flight: int) -> WorkerInstance | None:
    """The worker's row (the only one, with ``instance_id`` None) once it shows ``in_flight`` for
    the queue and no job available there: a write counts the available rows before it reads its
    in-flight count, so one write can show a job both running and available (counted just before
    its claim)."""
    rows = WorkerInstance.objects.all()
    row = (rows if instance_id is None else rows.filter(instance_id=instance_id)).first()
    if row is None or (row.capacity(queue) or {}).get("in_flight") != in_flight:
        return None
    return row if queues_from_json(row.queues)[queue].jobs_available is None else None


def _admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


def _health_json() -> dict[str, Any]:
    out = io.StringIO()
    try:
        call_command("awa_health", "--json", stdout=out)
    except CommandError:
        pass  # unhealthy (e.g. an old available job) still prints the report
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


@pytest.mark.django_db(transaction=True)
def test_snapshot__a_real_workers_row_is_what_the_admin_and_awa_health_read() -> None:
    Queue.objects.create(name="snapA", min_workers=1, weight=2)
    Queue.objects.create(name="snapB", min_workers=1, weight=1)
    config = make_config(
        {
            "snapA": QueueConfig("snapA", min_workers=1, weight=2),
            "snapB": QueueConfig("snapB", min_workers=1, weight=1),
        },
        global_max_workers=6,
    )
    recorder = Recorder()
    with running_worker(config, registry=recorder.registry) as worker:
        try:
            # Three jobs that block: snapA holds its one slot and two of the pool's four; snapB idles.
            enqueue("snapA", 3, ms=None, kind=BLOCK_KIND)
            row = wait_until(
                lambda: _row(worker.instance_id, "snapA", 3), timeout=30, what="the row to show 3 in flight"
            )
            # Nothing moves while the jobs block, so the allocator still says what the row says.
            allocator = worker.allocator
            assert allocator.capacity("snapA") == Weighted(min_workers=1, weight=2, overflow_held=2)
            written = queues_from_json(row.queues)
            assert set(written) == {"snapA", "snapB"}
            for name in ("snapA", "snapB"):
                assert written[name] == QueueSnapshot(
                    mode="weighted",
                    capacity=allocator.capacity(name),
                    in_flight=allocator.in_flight(name),
                    available=allocator.available(name),
                    paused=False,
                    jobs_available=None,  # no row waits: the count finds none
                )
                assert row.queues[name] == worker.health({})[name]  # one shape, in memory and stored
            flags = WorkerFlags.from_json(row.flags)
            assert (flags.in_flight, flags.stopping, flags.capacity_scope) == (3, False, "process")

            # The read models: services, the dashboard's JSON, awa_health.
            stats = queue_stats(workers=[row])
            [capacity] = stats["snapA"].capacities
            assert capacity == QueueCapacity(
                worker=str(row),
                mode="weighted",
                type="Weighted",
                min_workers=1,
                weight=2,
                overflow_held=2,
                in_flight=3,
                available=allocator.available("snapA"),
            )
            assert capacity.describe() == "weighted: min 1, weight 2, overflow held 2"

            response = _admin_client().get(reverse("admin:awa_dashboard_data"))
            assert response.status_code == 200
            [shown] = [w for w in response.json()["workers"] if w["instance_id"] == str(worker.instance_id)]
            assert shown["queues"]["snapA"] == capacity.__dict__ | {"describe": capacity.describe()}
            assert shown["queues"]["snapB"]["describe"] == "weighted: min 1, weight 1, overflow held 0"
            assert "weighted: min 1, weight 2, overflow held 2" in response.json()["html"]

            reported = {q["name"]: q for q in _health_json()["queues"]}
            assert reported["snapA"]["in_flight"] == 3
            assert reported["snapA"]["capacity"] == [capacity.__dict__ | {"describe": capacity.describe()}]
        finally:
            recorder.gate.set()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_snapshot__an_awa_worker_process_row_is_read_by_the_dashboard(spawn: Spawner) -> None:
    Queue.objects.create(name="snapH", max_workers=4)
    worker = spawn("-q", "snapH", "--heartbeat-interval", "0.5", "--shutdown-timeout", "1", name="snap")
    ids = [Job.objects.enqueue("sleep", {"seconds": 300}, queue="snapH").pk for _ in range(2)]

    def written() -> WorkerInstance | None:
        worker.assert_alive()
        return _row(None, "snapH", 2)

    row = wait_until(written, timeout=60, what="the worker's row to show its 2 running jobs, none available")
    snapshot = queues_from_json(row.queues)["snapH"]
    assert snapshot == QueueSnapshot("hard_reserved", HardReserved(max_workers=4), 2, 2, False, None)
    assert WorkerFlags.from_json(row.flags).in_flight == 2

    response = _admin_client().get(reverse("admin:awa_dashboard_data"))
    [shown] = response.json()["workers"]
    assert shown["queues"]["snapH"] | {"worker": None} == {
        "worker": None,
        "mode": "hard_reserved",
        "type": "HardReserved",
        "max_workers": 4,
        "min_workers": None,
        "weight": None,
        "overflow_held": 0,
        "in_flight": 2,
        "available": 2,
        "paused": False,
        "scope": "process",
        "cluster_limit": None,
        "describe": "hard-reserved: max 4",
    }
    assert shown["flags"]["in_flight"] == 2

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0
    assert not WorkerInstance.objects.exists()  # a worker that stopped removes its row
    assert Job.objects.filter(pk__in=ids, state="running").count() == 0  # handed back at the stop


@pytest.mark.django_db
def test_capacities__an_entry_that_breaks_the_schema_is_left_out_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    now = timezone.now()
    row = WorkerInstance.objects.create(
        instance_id=uuid.uuid4(),
        hostname="box",
        pid=1,
        started_at=now,
        last_seen_at=now,
        mode="hard_reserved",
        queues={"good": HARD.to_json(), "bad": HARD.to_json() | {"in_flight": "lots"}},
        flags={},
    )
    with caplog.at_level(logging.WARNING, logger="awa_django.services.cluster"):
        capacities = capacities_by_queue([row])
    assert set(capacities) == {"good"}
    [record] = [r for r in caplog.records if r.name == "awa_django.services.cluster"]
    assert "queue='bad'" in record.getMessage() or "queue=bad" in record.getMessage()
    assert "'in_flight' must be an integer, got 'lots'" in record.getMessage()
