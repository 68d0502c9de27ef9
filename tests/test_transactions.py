"""A job joins the caller's transaction: a second session sees it only after commit, never after rollback."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import transaction

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job
from tests.conftest import count_jobs


class RollbackError(Exception):
    pass


def test_enqueue__in_atomic_is_invisible_to_another_session_until_commit(
    other_connection: psycopg.Connection[Any],
) -> None:
    with transaction.atomic():
        job = Job.objects.enqueue("noop", {"n": 1})
        assert Job.objects.filter(pk=job.pk).exists()
        assert count_jobs(other_connection, id=job.pk) == 0

    assert count_jobs(other_connection, id=job.pk, state="available") == 1


def test_enqueue__rollback_means_the_job_never_existed(other_connection: psycopg.Connection[Any]) -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        job = Job.objects.enqueue("noop")
        assert count_jobs(other_connection, id=job.pk) == 0
        raise RollbackError

    assert count_jobs(other_connection, id=job.pk) == 0
    assert not Job.objects.filter(pk=job.pk).exists()


def test_enqueue__in_autocommit_is_visible_at_once(other_connection: psycopg.Connection[Any]) -> None:
    job = Job.objects.enqueue("noop")

    assert count_jobs(other_connection, id=job.pk) == 1


def test_enqueue__rolled_back_savepoint_drops_only_its_jobs(other_connection: psycopg.Connection[Any]) -> None:
    with transaction.atomic():
        kept = Job.objects.enqueue("noop", {"n": "kept"})
        with pytest.raises(RollbackError), transaction.atomic():
            dropped = Job.objects.enqueue("noop", {"n": "dropped"})
            raise RollbackError

    assert count_jobs(other_connection, id=kept.pk) == 1
    assert count_jobs(other_connection, id=dropped.pk) == 0


def test_enqueue__refused_call_in_atomic_does_not_poison_the_transaction(
    other_connection: psycopg.Connection[Any],
) -> None:
    with transaction.atomic():
        kept = Job.objects.enqueue("noop")
        with pytest.raises(InvalidJobError):
            Job.objects.enqueue("noop", max_attempts=0)
        with pytest.raises(InvalidJobError):
            Job.objects.enqueue_many([{"kind": "noop"}, {"kind": ""}])

    assert count_jobs(other_connection) == 1
    assert count_jobs(other_connection, id=kept.pk) == 1


def test_enqueue__on_commit_callbacks_see_the_committed_job(other_connection: psycopg.Connection[Any]) -> None:
    seen: list[int] = []

    with transaction.atomic():
        job = Job.objects.enqueue("noop")
        transaction.on_commit(lambda: seen.append(count_jobs(other_connection, id=job.pk)))
        assert seen == []

    assert seen == [1]
