"""Whose staleness the rescue uses: the leader's, or a still-reporting worker's own longer one.

Workers may run with their own ``--heartbeat-interval`` / ``--heartbeat-staleness`` (a rolling
deploy that raised ``HEARTBEAT_INTERVAL``, one worker tuned by hand). Each writes its staleness in
its snapshot's flags; ``rescue_stale_jobs`` leaves a running job alone while its heartbeat is
within its own worker's staleness, and ``delete_stale_worker_instances`` keeps that worker's row
as long. Both statements run here on rows made by hand, inside a rolled-back savepoint per
example, against every shape the flag may have (missing, malformed, negative, huge).
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import example, given, settings
from hypothesis import strategies as st

from awa_django.models import Job
from awa_django.sql import statements

HOST = "rescue-host"
PID = 4242

# A flag's value as a snapshot might hold it: a number of seconds (half-seconds, so never equal to
# a whole-second age), or what no worker writes (a string, a bool, a negative number, a huge one).
FLAG_VALUES = st.one_of(
    st.integers(min_value=1, max_value=400).map(lambda n: n + 0.5),
    st.sampled_from(["30", True, None, -10.5, 1e300]),
)
MISSING = object()


def effective(flag: Any) -> float | None:
    """The staleness the statements should take from a flag: a positive number of seconds."""
    if isinstance(flag, bool) or not isinstance(flag, int | float):
        return None
    return min(flag, 3_155_760_000.0)


# Staleness settings in half seconds and ages in whole ones: a row's age is never equal to one.
HALF_SECONDS = st.integers(min_value=1, max_value=300).map(lambda n: n + 0.5)
AGES = st.integers(min_value=0, max_value=600)
FLAGS = st.one_of(st.just(MISSING), FLAG_VALUES)


def add_instance(flag: Any, seen_ago: int = 0, instance: uuid.UUID | None = None) -> None:
    """A worker's snapshot row on HOST:PID, last seen ``seen_ago`` seconds back, its flags holding
    ``flag`` as its heartbeat staleness (none: MISSING)."""
    flags: dict[str, Any] = {"capacity_scope": "process"}
    if flag is not MISSING:
        flags["heartbeat_staleness"] = flag
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_worker_instance (instance_id, hostname, pid, started_at, last_seen_at, mode,"
            " queues, flags) VALUES (%s, %s, %s, now(), now() - make_interval(secs => %s), 'hard_reserved',"
            " '{}', %s::jsonb)",
            [str(instance or uuid.uuid4()), HOST, PID, seen_ago, json.dumps(flags)],
        )


@pytest.mark.django_db
@settings(max_examples=150)
@example(leader=1.5, age=5, flag=10.5, own_worker=True, deadline_passed=False)  # live, its own staleness
@example(leader=1.5, age=5, flag=10.5, own_worker=False, deadline_passed=False)  # another worker's row
@example(leader=1.5, age=12, flag=10.5, own_worker=True, deadline_passed=False)  # past its own too
@example(leader=1.5, age=5, flag=10.5, own_worker=True, deadline_passed=True)  # a deadline rescues anyway
@example(leader=1.5, age=5, flag="30", own_worker=True, deadline_passed=False)  # malformed: the leader's
@given(
    leader=HALF_SECONDS,
    age=AGES,
    flag=FLAGS,
    own_worker=st.booleans(),
    deadline_passed=st.booleans(),
)
def test_rescue__a_job_is_rescued_iff_past_the_leaders_staleness_and_its_own_reporting_workers(
    leader: float, age: int, flag: Any, own_worker: bool, deadline_passed: bool
) -> None:
    with transaction.atomic():
        job = Job.objects.enqueue("noop", queue="rescue-staleness")
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE awa_job SET state = 'running', attempt = 1, run_lease = 1, attempted_at = now(),"
                " heartbeat_at = now() - make_interval(secs => %s), attempted_by = %s,"
                " deadline_at = CASE WHEN %s THEN now() - interval '1 second' END WHERE id = %s",
                [age, f"{HOST}:{PID}" if own_worker else f"{HOST}:{PID + 1}", deadline_passed, job.pk],
            )
            add_instance(flag)
            cursor.execute(statements["rescue_stale_jobs"], {"staleness": timedelta(seconds=leader), "limit": 10})  # type: ignore[dict-item]
            rescued = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    own = effective(flag) if own_worker and flag is not MISSING else None
    expected = deadline_passed or (age > leader and (own is None or age > own))
    assert rescued == ([job.pk] if expected else []), (leader, age, flag, own_worker, deadline_passed)


@pytest.mark.django_db
@settings(max_examples=100)
@example(older_than=30.5, seen_ago=60, flag=120.5)  # within its own staleness: kept
@example(older_than=30.5, seen_ago=60, flag=True)  # malformed: the leader's
@given(
    older_than=HALF_SECONDS,
    seen_ago=AGES,
    flag=FLAGS,
)
def test_delete_stale_worker_instances__keeps_a_row_within_its_own_staleness(
    older_than: float, seen_ago: int, flag: Any
) -> None:
    with transaction.atomic():
        add_instance(flag, seen_ago)
        with connection.cursor() as cursor:
            cursor.execute(
                statements["delete_stale_worker_instances"],
                {"older_than": timedelta(seconds=older_than)},  # type: ignore[dict-item]
            )
            deleted = cursor.rowcount
        transaction.set_rollback(True)
    own = effective(flag) if flag is not MISSING else None
    expected = seen_ago > older_than and (own is None or seen_ago > own)
    assert deleted == (1 if expected else 0), (older_than, seen_ago, flag)


@pytest.mark.django_db
@settings(max_examples=100)
@example(staleness=30.5, reported_ago=60, flag=120.5)  # within its own staleness: live, kept
@example(staleness=30.5, reported_ago=60, flag="120")  # malformed: the leader's
@given(
    staleness=HALF_SECONDS,
    reported_ago=AGES,
    flag=FLAGS,
)
def test_cluster_capacity__a_worker_is_live_and_kept_within_its_own_staleness_plus_the_margin(
    staleness: float, reported_ago: int, flag: Any
) -> None:
    """The leader frees a silent worker's part of the cluster's capacity no sooner than the rescue
    takes its jobs: its own longer staleness (and the report margin) counts there too."""
    margin = 0.25  # a quarter second: never equal to a whole-second age beside the half-second values
    instance = uuid.uuid4()
    with transaction.atomic():
        add_instance(flag, instance=instance)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO awa_worker_capacity (instance_id, use, applied, caps, read, floors, rates, reported_at)"
                " VALUES (%s, '{}', '{}', '{}', '{}', '{}', '{}', now() - make_interval(secs => %s))",
                [str(instance), reported_ago],
            )
            params: dict[str, Any] = {"staleness": timedelta(seconds=staleness), "margin": timedelta(seconds=margin)}
            cursor.execute(statements["lock_capacities"], params)
            live = {row[0]: row[5] for row in cursor.fetchall()}[instance]
            cursor.execute(statements["delete_dead_capacities"], params)
            deleted = cursor.rowcount
        transaction.set_rollback(True)
    own = effective(flag) if flag is not MISSING else None
    expected_live = reported_ago < staleness or (own is not None and reported_ago < own + margin)
    assert (live, deleted) == (expected_live, 0 if expected_live else 1), (staleness, reported_ago, flag)
