"""The maintenance leader's slow duties (retention and the history rollup, ``worker/duty.py``) run
beside its round, each on a connection of its own, and only while the worker leads.

Each duty is made slow for real: another session holds a lock its statement must wait for, so the
wait lasts exactly as long as the test needs. Meanwhile a job scheduled a second ahead must be
promoted by the leader's round. Before the duties had their own tasks, the round waited for the
blocked statement and the job stayed scheduled."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.utils import timezone

from awa_django.models import HistoryMark, Job, JobState
from awa_django.sql import statements
from awa_django.worker.election import LEADER_LOCK
from tests.conftest import connect_outside_django, connection_params
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import wait_for_row

DUTIES = ("retention", "history")


def sessions(purpose: str) -> int:
    """The worker's sessions on the test database opened for ``purpose`` (``connect``'s suffix of
    application_name)."""
    with connect_outside_django() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s",
            [f"%:{purpose}"],
        ).fetchone()
    assert row is not None
    return int(row[0])


def blocked_by(holder: psycopg.Connection[Any]) -> list[str]:
    """The purposes of the sessions waiting for a lock ``holder`` holds."""
    with connect_outside_django() as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE %s = ANY(pg_blocking_pids(pid)) ORDER BY application_name",
            [holder.info.backend_pid],
        ).fetchall()
    return [name.rpartition(":")[2] for (name,) in rows]


@pytest.fixture
def holder(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A session of the test's own, outside autocommit: the locks it takes hold until it commits."""
    conn = psycopg.connect(**connection_params())
    try:
        yield conn
    finally:
        conn.close()


def schedule_and_see_promoted(holder: psycopg.Connection[Any]) -> None:
    """A job due in a second on a queue no worker serves is made available by the leader's round
    while a session of the worker still waits for ``holder``'s lock."""
    job = Job.objects.enqueue("noop", queue="unserved", run_at=timezone.now() + timedelta(seconds=1))
    assert job.state == JobState.SCHEDULED
    wait_for_row(job.pk, state="available")
    assert blocked_by(holder), "the duty stopped waiting before the job was promoted"


@pytest.mark.django_db(transaction=True)
def test_leader__history_rollup_waits_on_a_lock__due_jobs_are_still_promoted(holder: psycopg.Connection[Any]) -> None:
    holder.execute(statements["lock_history_mark"], {"now": None})  # the watermark row, until commit

    with running_worker(make_config(["other"])):
        wait_until(lambda: blocked_by(holder), what="the rollup waiting for the watermark's row lock")
        schedule_and_see_promoted(holder)
        schedule_and_see_promoted(holder)  # and in the round after it
        assert blocked_by(holder) == ["maintenance-history"]  # and the round after it

        holder.commit()
        wait_until(
            lambda: HistoryMark.objects.filter(closed_through__isnull=False).exists(),
            what="the rollup's round once the lock went",
        )


@pytest.mark.django_db(transaction=True)
def test_leader__retention_waits_on_a_lock__due_jobs_are_still_promoted(holder: psycopg.Connection[Any]) -> None:
    # Every batch of retention's sweep deletes the in-edges of the jobs it deletes, so its DELETE
    # waits for this lock; the leader's round and a plain job's enqueue never touch the edges.
    holder.execute("LOCK TABLE awa_job_edge IN ACCESS EXCLUSIVE MODE")

    with running_worker(make_config(["other"])):
        wait_until(lambda: blocked_by(holder), what="the retention duty waiting for its lock")
        schedule_and_see_promoted(holder)
        schedule_and_see_promoted(holder)  # and in the round after it
        assert blocked_by(holder) == ["maintenance-retention"]

        holder.commit()
        wait_until(lambda: not blocked_by(holder), what="the retention duty done waiting once the lock went")


@pytest.mark.django_db(transaction=True)
def test_leader__losing_the_leadership__stops_the_duties_and_closes_their_connections() -> None:
    other = connect_outside_django()  # a contender that takes the lock over once the worker's session ends
    try:
        with running_worker(make_config(["other"])) as worker:
            wait_until(
                lambda: all(sessions(f"maintenance-{duty}") == 1 for duty in DUTIES),
                what="both duties' connections open",
            )

            def take_over() -> bool:
                # End the leader's main session (its advisory lock goes with it) until the contender
                # holds the lock; the worker may reconnect and win it back in between.
                other.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name LIKE '%:maintenance'"
                )
                row = other.execute("SELECT pg_try_advisory_lock(%s, %s)", LEADER_LOCK).fetchone()
                return row is not None and bool(row[0])

            wait_until(take_over, what="the contender holding the leader's lock")
            wait_until(
                lambda: not worker.is_leader and all(sessions(f"maintenance-{duty}") == 0 for duty in DUTIES),
                what="the duties stopped and their connections closed",
            )
            # The worker campaigns again on a new main connection, and loses while the contender leads.
            wait_until(lambda: sessions("maintenance") == 1, what="the worker's main connection back")
            assert not worker.is_leader
            assert all(sessions(f"maintenance-{duty}") == 0 for duty in DUTIES)

            other.execute("SELECT pg_advisory_unlock(%s, %s)", LEADER_LOCK)
            wait_until(
                lambda: worker.is_leader and all(sessions(f"maintenance-{duty}") == 1 for duty in DUTIES),
                what="the duties back with the leadership",
            )
    finally:
        other.close()
