"""The statements that move running jobs on (the rescue, a stopping worker's release, a batch of
outcomes) hand the jobs they ended to ``awa_release_jobs``, and only those: a statement that ended
none does not call it. The function's first probes read ``awa_job_edge`` and ``awa_job_waiter``,
so a call for nothing waited behind any lock on those tables. A fresh-clone CI run saw it: with the
edges locked, the leader's rescue (which had only jobs to make retryable, or none) waited at the
head of its round, and a due job was never promoted.

Each case runs its statement with ``awa_job_edge`` held ACCESS EXCLUSIVE by another session and a
short ``lock_timeout``: a statement that asks for the edges' lock fails with LockNotAvailable,
one that does not never waits. The property: the statement asks for that lock exactly when one
of its jobs ended (completed, failed or cancelled)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.models import Job
from awa_django.sql import statements
from tests.conftest import connect_outside_django, connection_params

ENDED = ("completed", "failed", "cancelled")


@pytest.fixture
def edges_locked(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A session holding awa_job_edge ACCESS EXCLUSIVE until the test ends."""
    holder = psycopg.connect(**connection_params())
    holder.execute("LOCK TABLE awa_job_edge IN ACCESS EXCLUSIVE MODE")
    try:
        yield holder
    finally:
        holder.close()


def running_jobs(attempts: list[tuple[int, int]]) -> list[int]:
    """Jobs claimed by a worker that went silent an hour ago, one per (attempt, max_attempts)."""
    ids = []
    for attempt, max_attempts in attempts:
        job = Job.objects.enqueue("noop", queue="release-probe", max_attempts=max_attempts)
        Job.objects.filter(pk=job.pk).update(
            state="running", attempt=attempt, run_lease=1, attempted_by="gone:1", heartbeat_at="2000-01-01T00:00:00Z"
        )
        ids.append(job.pk)
    return ids


def run(statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]] | None:
    """``statement``'s rows, or None when it asked for a lock another session holds."""
    with connect_outside_django() as conn:
        conn.execute("SET lock_timeout = '200ms'")
        try:
            return conn.execute(statements[statement], params).fetchall()
        except psycopg.errors.LockNotAvailable:
            return None


def final_states(ids: list[int]) -> dict[int, str]:
    with connect_outside_django() as conn:
        rows = conn.execute("SELECT id, state FROM awa_job_all WHERE id = ANY(%s)", [ids]).fetchall()
    return dict(rows)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("last_attempt", [False, True], ids=["retryable", "failed"])
def test_rescue__asks_for_the_edges_only_when_it_failed_a_job(
    edges_locked: psycopg.Connection[Any], last_attempt: bool
) -> None:
    ids = running_jobs([(3 if last_attempt else 1, 3)])
    rows = run("rescue_stale_jobs", {"staleness": timedelta(minutes=1), "limit": 10})
    if last_attempt:
        assert rows is None  # it fails the job, and releasing its dependents reads the edges
        assert final_states(ids) == {ids[0]: "running"}  # the statement rolled back whole
    else:
        assert rows is not None and [row[:2] for row in rows] == [(ids[0], "retryable")]


@pytest.mark.django_db(transaction=True)
def test_rescue__nothing_stale__never_asks_for_the_edges(edges_locked: psycopg.Connection[Any]) -> None:
    assert run("rescue_stale_jobs", {"staleness": timedelta(minutes=1), "limit": 10}) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("last_attempt", [False, True], ids=["retryable", "failed"])
def test_release__asks_for_the_edges_only_when_it_failed_a_job(
    edges_locked: psycopg.Connection[Any], last_attempt: bool
) -> None:
    ids = running_jobs([(3 if last_attempt else 1, 3)])
    rows = run("release_jobs", {"ids": ids, "leases": [1], "reason": "worker stopping"})
    assert (rows is None) == last_attempt
    assert final_states(ids) == {ids[0]: "running" if last_attempt else "retryable"}


OUTCOMES = st.sampled_from(["retryable", "scheduled", "completed", "failed", "cancelled"])


@pytest.mark.django_db(transaction=True)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outcomes=st.lists(OUTCOMES, min_size=1, max_size=4))
def test_finalize__asks_for_the_edges_exactly_when_an_outcome_ends_a_job(
    edges_locked: psycopg.Connection[Any], outcomes: list[str]
) -> None:
    ids = running_jobs([(1, 3)] * len(outcomes))
    error = json.dumps({"error": "boom", "attempt": 1})
    rows = run(
        "finalize_jobs",
        {
            "ids": ids,
            "leases": [1] * len(ids),
            "states": outcomes,
            "delays": [60.0] * len(ids),
            "errors": [error] * len(ids),
            "refunds": [0] * len(ids),
            "progress": [None] * len(ids),
            "results": [None] * len(ids),
        },
    )
    ends = any(outcome in ENDED for outcome in outcomes)
    assert (rows is None) == ends, f"outcomes {outcomes}: asked for the edges' lock: {rows is None}"
    expected = ["running"] * len(ids) if ends else outcomes
    assert final_states(ids) == dict(zip(ids, expected, strict=True))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("statement", ["complete_job", "complete_jobs"])
@pytest.mark.parametrize("lease", [1, 2], ids=["its-lease", "a-late-write"])
def test_completion__asks_for_the_edges_only_when_it_completed_the_job(
    edges_locked: psycopg.Connection[Any], statement: str, lease: int
) -> None:
    ids = running_jobs([(1, 3)])
    params = {"id": ids[0], "lease": lease} if statement == "complete_job" else {"ids": ids, "leases": [lease]}
    rows = run(statement, params)
    assert (rows is None) == (lease == 1)
    assert final_states(ids) == {ids[0]: "running"}  # refused by its guard, or rolled back
