"""Wake-ups: inserting available jobs NOTIFYs ``awa_jobs`` with the queue name, once per queue per
transaction, delivered at commit; scheduled jobs and rolled-back inserts wake nobody."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from awa_django import managers
from awa_django.exceptions import UniqueJobConflictError
from awa_django.models import Job, Queue
from awa_django.sql import QUEUES_CHANNEL
from tests.conftest import Listener, connect_outside_django
from tests.factories import QueueFactory


class RollbackError(Exception):
    pass


def test_notify__enqueue_notifies_its_queue_at_commit_not_before(listener: Listener) -> None:
    with transaction.atomic():
        Job.objects.enqueue("noop", queue="emails")
        assert listener.drain() == []

    assert listener.drain() == ["emails"]


def test_notify__enqueue_in_autocommit_notifies_at_once(listener: Listener) -> None:
    Job.objects.enqueue("noop", queue="emails")

    assert listener.drain() == ["emails"]


def test_notify__one_per_queue_per_transaction(listener: Listener) -> None:
    with transaction.atomic():
        for _ in range(5):
            Job.objects.enqueue("noop", queue="a")
        for _ in range(3):
            Job.objects.enqueue("noop", queue="b")
        Job.objects.enqueue_many([{"kind": "noop", "queue": "a"}, {"kind": "noop", "queue": "b"}])

    assert sorted(listener.drain()) == ["a", "b"]


def test_notify__separate_transactions_notify_separately(listener: Listener) -> None:
    Job.objects.enqueue("noop", queue="a")
    Job.objects.enqueue("noop", queue="a")

    assert listener.drain() == ["a", "a"]


def test_notify__scheduled_only_inserts_send_none(listener: Listener) -> None:
    later = timezone.now() + timedelta(hours=1)

    with transaction.atomic():
        Job.objects.enqueue("noop", queue="a", run_at=later)
        Job.objects.enqueue_many([{"kind": "noop", "queue": "b", "run_at": later}] * 10)

    assert listener.drain() == []
    assert Job.objects.scheduled().count() == 11


def test_notify__only_queues_with_available_jobs_are_notified(listener: Listener) -> None:
    later = timezone.now() + timedelta(hours=1)

    Job.objects.enqueue_many([{"kind": "noop", "queue": "later", "run_at": later}, {"kind": "noop", "queue": "now"}])

    assert listener.drain() == ["now"]


def test_notify__rolled_back_insert_sends_none(listener: Listener) -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        Job.objects.enqueue("noop", queue="a")
        Job.objects.enqueue_many([{"kind": "noop", "queue": "b"}])
        raise RollbackError

    assert listener.drain() == []


def test_notify__enqueue_many_of_1000_jobs_in_two_queues_sends_two(listener: Listener) -> None:
    with transaction.atomic():
        Job.objects.enqueue_many({"kind": "noop", "queue": f"q{i % 2}", "args": {"i": i}} for i in range(1_000))

    assert sorted(listener.drain()) == ["q0", "q1"]
    assert Job.objects.count() == 1_000


def test_notify__several_copy_batches_still_send_one_per_queue(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(managers, "COPY_BATCH_SIZE", 10)

    Job.objects.enqueue_many({"kind": "noop", "queue": f"q{i % 2}"} for i in range(95))

    assert sorted(listener.drain()) == ["q0", "q1"]


def test_notify__orm_insert_of_an_available_job_notifies_too(listener: Listener) -> None:
    Job.objects.create(kind="noop", queue="orm")

    assert listener.drain() == ["orm"]


def test_notify__queue_changes_notify_the_queues_channel(transactional_db: Any) -> None:
    with connect_outside_django() as conn:
        conn.execute(f"LISTEN {QUEUES_CHANNEL}")
        queue = QueueFactory(name="emails")
        queue.weight = 3
        queue.save()
        Queue.objects.filter(pk=queue.pk).delete()

        payloads = [n.payload for n in conn.notifies(timeout=10, stop_after=3)]

    assert payloads == ["emails", "emails", "emails"]


def test_notify__multi_row_sql_insert_notifies_each_queue_once(listener: Listener) -> None:
    with connect_outside_django() as conn:
        conn.execute(
            "INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, "
            "errors, metadata, tags, run_lease) "
            "SELECT 'noop', 'sql' || (g % 3), '{}', 'available', 2, 0, 25, now(), now(), '[]', '{}', '{}', 0 "
            "FROM generate_series(1, 300) AS g"
        )

    assert sorted(listener.drain()) == ["sql0", "sql1", "sql2"]


def test_notify__inserts_after_enqueue_many_in_the_same_transaction_still_notify(listener: Listener) -> None:
    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": "noop", "queue": "bulk"}])
        Job.objects.create(kind="noop", queue="orm")
        Job.objects.enqueue("noop", queue="single")

    assert sorted(listener.drain()) == ["bulk", "orm", "single"]


def test_notify__a_failed_enqueue_many_leaves_the_trigger_on_for_the_transaction(listener: Listener) -> None:
    Job.objects.enqueue("noop", queue="taken", unique=True)
    listener.drain()

    with transaction.atomic():
        with pytest.raises(UniqueJobConflictError):
            Job.objects.enqueue_many(
                [{"kind": "noop", "queue": "bulk"}, {"kind": "noop", "queue": "taken", "unique": True}]
            )
        Job.objects.create(kind="noop", queue="orm")

    assert listener.drain() == ["orm"]
    assert not Job.objects.filter(queue="bulk").exists()
