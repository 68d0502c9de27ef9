"""Parked durable jobs in the cluster's numbers: ``awa_queue_parked_jobs{queue,parked}`` counts the
jobs sleeping and waiting for an event per queue, and ``awa_health`` does not call them stuck,
however long they have been parked."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from awa_django.models import Job
from awa_django.services.jobs import cancel_jobs
from awa_django.services.steps import parked_counts
from awa_django.worker import JobContext
from tests.admin.test_health_command import health, worker_row
from tests.durable.support import expire, registry_of, run_once

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.django_db


def _handler(context: JobContext) -> Any:
    if context.metadata.get("sleep"):
        context.sleep(3600)
    return context.wait_for("approved", timeout=context.metadata.get("timeout"))


REGISTRY = registry_of("parked.metrics", _handler, queue="default")


def parked(queue: str, **metadata: Any) -> Job:
    """A job run in-process until it parks: in its sleep (sleep=True), else in its wait."""
    job = Job.objects.enqueue("parked.metrics", {}, queue=queue, metadata=metadata)
    run = run_once(job.pk, REGISTRY)
    assert run is not None and run.parked, run
    return job


def fleet() -> None:
    """In "a": 2 sleeping, 3 waiting (one with a timeout); in "b": 1 waiting; and jobs that are
    not parked: a plain scheduled job, a workflow step waiting for its upstreams, a cancelled
    parked job, a sleeper whose wait then got its event."""
    parked("a", sleep=True), parked("a", sleep=True)
    parked("a"), parked("a"), parked("a", timeout=600)
    parked("b")
    Job.objects.enqueue("plain", queue="a", run_at=timezone.now() + timedelta(hours=1))
    upstream = Job.objects.enqueue("plain", queue="a")
    Job.objects.filter(pk=upstream.pk).update(state="waiting", pending=1)
    cancel_jobs([parked("a").pk])
    woken = parked("b", sleep=True)
    expire(woken.pk)
    run_once(woken.pk, REGISTRY)  # now parked in its wait
    Job.objects.signal(woken.pk, "approved")  # and woken: available, not parked


def test_parked_counts__sleeping_and_waiting_per_queue() -> None:
    fleet()
    assert parked_counts() == {"a": {"sleeping": 2, "waiting": 3}, "b": {"sleeping": 0, "waiting": 1}}
    assert parked_counts(["b"]) == {"b": {"sleeping": 0, "waiting": 1}}
    assert parked_counts([]) == {}


def test_metrics_view__awa_queue_parked_jobs_per_queue(admin_client: Client) -> None:
    fleet()
    Job.objects.enqueue("plain", queue="c")  # a queue with no parked job gets zeros

    response = admin_client.get("/awa/metrics")

    assert response.status_code == 200, response.content
    samples = {
        (sample.labels["queue"], sample.labels["parked"]): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        if family.name == "awa_queue_parked_jobs"
        for sample in family.samples
    }
    assert {labels: value for labels, value in samples.items() if labels[0] in ("a", "b", "c")} == {
        ("a", "sleeping"): 2.0,
        ("a", "waiting"): 3.0,
        ("b", "sleeping"): 0.0,
        ("b", "waiting"): 1.0,
        ("c", "sleeping"): 0.0,
        ("c", "waiting"): 0.0,
    }


def test_awa_health__parked_jobs_are_not_stuck_however_long_they_have_been_parked() -> None:
    worker_row()
    sleeper, waiter, deadline = parked("default", sleep=True), parked("default"), parked("default", timeout=600)
    long_ago = timezone.now() - timedelta(days=30)  # enqueued and parked a month ago
    Job.objects.filter(pk__in=[sleeper.pk, waiter.pk, deadline.pk]).update(created_at=long_ago, run_at=long_ago)
    Job.objects.filter(pk=sleeper.pk).update(run_at=timezone.now() + timedelta(days=1))  # its wake time

    code, out, err = health("--json", "--max-age", "60")

    assert (code, err) == (0, "")
    [queue] = [q for q in json.loads(out)["queues"] if q["name"] == "default"]
    assert (queue["healthy"], queue["too_old"], queue["oldest_available_age_seconds"]) == (True, False, None)
