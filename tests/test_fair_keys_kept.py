"""A job keeps its fairness key through every way back to waiting: a retry, a snooze, a rescue and
a hand-back at shutdown. Read from the rows after real runs (``run_jobs`` and in-process workers
running the worker's own SQL); nothing may rewrite the column, so every attempt is claimed under
the key the job was enqueued with."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from awa_django.exceptions import Snooze
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry, job, registry
from awa_django.sql import statements
from awa_django.testing import run_jobs
from awa_django.worker import JobContext, QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates, row, wait_for_row

KEY = "tenant:42 ключ"


@pytest.fixture
def gates() -> Iterator[Gates]:
    """Opened at teardown, so a failing test leaves no handler waiting."""
    value = Gates()
    try:
        yield value
    finally:
        value.open_all()


@pytest.mark.django_db
def test_run_jobs__retried_and_snoozed_jobs_keep_their_key_to_completion() -> None:
    calls: list[str] = []

    @job("test_fk_flaky")
    def flaky() -> None:
        calls.append("flaky")
        if calls.count("flaky") == 1:
            raise RuntimeError("first attempt fails")

    @job("test_fk_snoozer", fair_key=lambda args: f"derived:{args['n']}")
    def snoozer(n: int) -> None:
        calls.append("snoozer")
        if calls.count("snoozer") == 1:
            raise Snooze(60)

    try:
        flaky_id = Job.objects.enqueue("test_fk_flaky", fair_key=KEY).pk
        snoozed_id = Job.objects.enqueue("test_fk_snoozer", {"n": 3}).pk

        first = run_jobs(raise_on_failure=False)
        assert sorted(r.state for r in first) == ["retryable", "scheduled"]
        assert (row(flaky_id).fair_key, row(snoozed_id).fair_key) == (KEY, "derived:3")

        second = run_jobs(now=timezone.now() + timedelta(hours=1), raise_on_failure=False)  # past backoff and snooze
    finally:
        registry.unregister("test_fk_flaky")
        registry.unregister("test_fk_snoozer")

    assert sorted(r.state for r in second) == ["completed", "completed"]
    done_flaky, done_snoozed = row(flaky_id), row(snoozed_id)
    assert (done_flaky.state, done_flaky.attempt, done_flaky.fair_key) == ("completed", 2, KEY)
    assert (done_snoozed.state, done_snoozed.fair_key) == ("completed", "derived:3")


@pytest.mark.django_db(transaction=True)
def test_worker__rescued_job_keeps_its_key_and_is_reclaimed_under_it(gates: Gates) -> None:
    leases: list[int] = []

    async def gated(context: JobContext) -> None:
        leases.append(context.run_lease)
        await gates.wait(context.run_lease)

    handlers = Registry()
    handlers.register(JobHandler("test_fk_gated", gated, queue="fk_rescue", takes_context=True))
    config = make_config({"fk_rescue": QueueConfig("fk_rescue", max_workers=1)}, heartbeat_staleness=60.0)
    job_id = Job.objects.enqueue("test_fk_gated", queue="fk_rescue", fair_key=KEY).pk

    with running_worker(config, registry=handlers) as worker:
        wait_until(lambda: job_id in worker.in_flight and leases == [1], what="attempt 1 running")
        with transaction.atomic(), connection.cursor() as cursor:
            Job.objects.filter(pk=job_id).update(heartbeat_at=Now() - timedelta(hours=1))
            cursor.execute(statements["rescue_stale_jobs"], {"staleness": timedelta(minutes=1), "limit": 10})  # type: ignore[dict-item]
            assert [r[:2] for r in cursor.fetchall()] == [(job_id, "retryable")]
        assert row(job_id).fair_key == KEY
        gates.open(1)  # the lost attempt returns (its write misses the lease guard) and frees the slot
        reclaimed = wait_for_row(job_id, state="running", run_lease=3)
        assert reclaimed.fair_key == KEY
        gates.open(3)
        done = wait_for_row(job_id, state="completed")

    assert (done.attempt, done.fair_key) == (2, KEY)
    assert "rescued" in done.errors[0]["error"]


@pytest.mark.django_db(transaction=True)
def test_worker__handed_back_at_shutdown_job_keeps_its_key(gates: Gates) -> None:
    async def stubborn(context: JobContext) -> None:
        await gates.wait("never opened")

    handlers = Registry()
    handlers.register(JobHandler("test_fk_stubborn", stubborn, queue="fk_handback", takes_context=True))
    config = make_config(["fk_handback"], shutdown_timeout=0.2)
    ids = [Job.objects.enqueue("test_fk_stubborn", queue="fk_handback", fair_key=f"{KEY}:{n}").pk for n in range(3)]

    with running_worker(config, registry=handlers) as worker:
        wait_until(lambda: set(ids) <= set(worker.in_flight), what="all three running")

    for n, job_id in enumerate(ids):
        handed_back = row(job_id)
        assert handed_back.state == "retryable", (handed_back.state, handed_back.errors)
        assert "shutdown timeout" in handed_back.errors[0]["error"]
        assert handed_back.fair_key == f"{KEY}:{n}"
