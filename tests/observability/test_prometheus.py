"""Prometheus: a real worker subprocess serving --metrics-port, scraped during the run; the depth
view against the database. Needs the metrics extra (prometheus-client)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from awa_django.models import Job, Queue, WorkerInstance
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Spawner

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from awa_django.observability.prometheus import Sink  # noqa: E402

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return _parse(response.read().decode())
    except OSError:
        return None


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _when(port: int, check: Callable[[Samples], bool]) -> Callable[[], Samples | None]:
    def scrape() -> Samples | None:
        samples = _scrape(port)
        return samples if samples is not None and check(samples) else None

    return scrape


@pytest.mark.slow
def test_worker_endpoint__counters_move_and_gauges_match_the_database(spawn: Spawner) -> None:
    port = _free_port()
    Queue.objects.create(name="metered", max_workers=3)
    worker = spawn("-q", "metered", "--metrics-port", str(port), "--shutdown-timeout", "1")
    before = wait_until(_when(port, lambda s: _value(s, "awa_worker_up") == 1.0), timeout=60, what="the endpoint")
    assert _value(before, "awa_jobs_total", queue="metered", kind="noop", outcome="completed") in (None, 0.0)

    Job.objects.enqueue_many([{"kind": "noop", "queue": "metered"} for _ in range(25)])
    Job.objects.enqueue("fail", {"message": "on purpose"}, queue="metered", max_attempts=1)
    after = wait_until(
        _when(
            port,
            lambda s: (
                _value(s, "awa_jobs_total", queue="metered", kind="noop", outcome="completed") == 25.0
                and _value(s, "awa_jobs_total", queue="metered", kind="fail", outcome="failed") == 1.0
            ),
        ),
        timeout=60,
        what="the counters to reach 25 completed and 1 failed",
    )
    assert Job.objects.filter(queue="metered", state="completed").count() == 25
    assert _value(after, "awa_job_wait_seconds_count", queue="metered", kind="noop") == 25.0
    assert _value(after, "awa_job_run_seconds_count", queue="metered", kind="noop") == 25.0
    assert _value(after, "awa_queue_floor", queue="metered") == 3.0

    # Three long jobs hold the queue's three slots: the gauges must say what the rows say.
    Job.objects.enqueue_many([{"kind": "sleep", "args": {"seconds": 60}, "queue": "metered"} for _ in range(4)])
    wait_until(lambda: Job.objects.filter(queue="metered", state="running").count() == 3, timeout=30, what="3 running")
    held = wait_until(
        _when(port, lambda s: _value(s, "awa_queue_running", queue="metered") == 3.0),
        timeout=30,
        what="the running gauge at 3",
    )
    running_rows = Job.objects.filter(queue="metered", state="running").count()
    assert _value(held, "awa_queue_running", queue="metered") == running_rows == 3
    assert _value(held, "awa_worker_permits_in_use") == 3.0
    assert _value(held, "awa_queue_available_permits", queue="metered") == 0.0
    assert _value(held, "awa_worker_leader") == 1.0  # the only worker leads maintenance
    worker.assert_alive()


def test_worker_endpoint__port_taken__clear_error(spawn: Spawner, transactional_db: None) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = spawn("-q", "x", "--metrics-port", str(port))
        assert worker.wait_exit(60) != 0
    assert f"cannot serve metrics on 0.0.0.0:{port}" in worker.log
    assert "--metrics-port" in worker.log


@pytest.mark.django_db(transaction=True)
def test_weighted_gauges__floor_weight_share_and_overflow_in_process() -> None:
    from awa_django.worker import QueueConfig

    sink = Sink()
    queues = {"a": QueueConfig("a", min_workers=1, weight=3), "b": QueueConfig("b", min_workers=0, weight=1)}
    with running_worker(make_config(queues, global_max_workers=5), metrics=sink):
        text = prometheus_client.generate_latest(sink.registry).decode()
    samples = _parse(text)
    assert _value(samples, "awa_queue_floor", queue="a") == 1.0
    assert _value(samples, "awa_queue_weight", queue="a") == 3.0
    assert _value(samples, "awa_queue_weight", queue="b") == 1.0
    assert _value(samples, "awa_worker_permits_max") == 5.0
    assert _value(samples, "awa_queue_overflow_held", queue="a") == 0.0


@pytest.mark.django_db
def test_depth_view__gauges_match_the_database(admin_client: Client) -> None:
    now = timezone.now()
    Queue.objects.create(name="deep", paused=True)
    Job.objects.enqueue_many([{"kind": "noop", "queue": "deep"} for _ in range(4)])
    Job.objects.enqueue("noop", queue="deep", run_at=now + timedelta(hours=1))
    Job.objects.enqueue("noop", queue="shallow")
    first, *_, last = Job.objects.filter(queue="deep", state="available").order_by("id")
    Job.objects.filter(pk=first.pk).update(run_at=now - timedelta(seconds=90))
    Job.objects.filter(pk=last.pk).update(state="running", attempt=1)
    WorkerInstance.objects.create(
        instance_id="00000000-0000-0000-0000-000000000001",
        hostname="h",
        pid=1,
        started_at=now,
        last_seen_at=now,
        mode="hard_reserved",
        flags={"leader": True},
    )

    response = admin_client.get("/awa/metrics")
    assert response.status_code == 200, response.content
    samples = _parse(response.content.decode())
    for queue in ("deep", "shallow"):
        for state in ("scheduled", "available", "running", "retryable"):
            rows = Job.objects.filter(queue=queue, state=state).count()
            assert _value(samples, "awa_queue_jobs", queue=queue, state=state) == rows, (queue, state)
    assert _value(samples, "awa_queue_jobs", queue="deep", state="available") == 3
    age = _value(samples, "awa_queue_oldest_available_age_seconds", queue="deep")
    assert age is not None and age >= 90
    assert _value(samples, "awa_queue_paused", queue="deep") == 1.0
    assert _value(samples, "awa_queue_paused", queue="shallow") == 0.0
    assert _value(samples, "awa_workers_live") == 1.0
    assert _value(samples, "awa_workers_leader") == 1.0


@pytest.mark.django_db
def test_depth_view__a_snapshot_whose_flags_are_not_an_object_counts_as_no_leader(admin_client: Client) -> None:
    """``(flags or {}).get("leader")`` raised AttributeError on flags written as a list or text: the
    whole scrape answered 500, every gauge lost, where the pages read such flags as none."""
    now = timezone.now()
    for n, flags in enumerate([["leader"], "leader", {"leader": True}], start=1):
        WorkerInstance.objects.create(
            instance_id=f"00000000-0000-0000-0000-00000000000{n}", hostname="h", pid=n,
            started_at=now, last_seen_at=now, mode="hard_reserved", flags=flags,
        )  # fmt: skip

    response = admin_client.get("/awa/metrics")

    assert response.status_code == 200
    samples = _parse(response.content.decode())
    assert _value(samples, "awa_workers_live") == 3.0
    assert _value(samples, "awa_workers_leader") == 1.0


@pytest.mark.django_db
def test_depth_view__token_required_when_set() -> None:
    with override_settings(AWA={"METRICS_TOKEN": "s3cret"}):
        assert Client().get("/awa/metrics").status_code == 401
        assert Client().get("/awa/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = Client().get("/awa/metrics", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert b"awa_workers_live" in ok.content


@pytest.mark.django_db
def test_depth_view__closed_by_default__staff_or_token_or_the_open_setting(
    admin_client: Client, django_user_model: Any
) -> None:
    anonymous = Client().get("/awa/metrics")
    assert anonymous.status_code == 403
    assert b"METRICS_TOKEN" in anonymous.content and b"METRICS_OPEN" in anonymous.content
    clerk = Client()
    clerk.force_login(django_user_model.objects.create_user("clerk", password="x"))
    assert clerk.get("/awa/metrics").status_code == 403  # logged in, not staff
    assert admin_client.get("/awa/metrics").status_code == 200
    with override_settings(AWA={"METRICS_TOKEN": "s3cret"}):
        assert admin_client.get("/awa/metrics").status_code == 200  # staff needs no token
        assert Client().get("/awa/metrics").status_code == 401
    with override_settings(AWA={"METRICS_OPEN": True}):
        assert Client().get("/awa/metrics").status_code == 200


def test_sink__histogram_buckets_are_cumulative_and_inclusive() -> None:
    sink = Sink()
    for value in (0.0, 0.005, 0.0051, 4000.0):
        sink.job_started("q", "k", value)
    sink.job_started("q", "k", None)  # not measured: not observed
    sink.job_finished("q", "k", "completed", 0.2)
    sink.job_finished("q", "k", "completed", None)
    sink.job_finished("q", "k", "failed", 0.2)
    samples = _parse(prometheus_client.generate_latest(sink.registry).decode())
    bucket = "awa_job_wait_seconds_bucket"
    assert _value(samples, bucket, queue="q", kind="k", le="0.005") == 2  # 0.0 and 0.005 (le is inclusive)
    assert _value(samples, bucket, queue="q", kind="k", le="0.01") == 3
    assert _value(samples, bucket, queue="q", kind="k", le="3600.0") == 3
    assert _value(samples, bucket, queue="q", kind="k", le="+Inf") == 4
    assert _value(samples, "awa_job_wait_seconds_count", queue="q", kind="k") == 4
    assert _value(samples, "awa_job_wait_seconds_sum", queue="q", kind="k") == pytest.approx(4000.0101)
    assert _value(samples, "awa_jobs_total", queue="q", kind="k", outcome="completed") == 2
    assert _value(samples, "awa_jobs_total", queue="q", kind="k", outcome="failed") == 1
    assert _value(samples, "awa_job_run_seconds_count", queue="q", kind="k") == 2
