"""Unique jobs: a second job with the same key is refused while the first is in one of its unique states.

The partial unique index decides, so the rule holds across sessions: a concurrent duplicate blocks
on the index until the first transaction ends, then loses (commit) or wins (rollback).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from awa_django import managers
from awa_django.exceptions import InvalidJobError, UniqueJobConflictError
from awa_django.managers import UniqueOptions
from awa_django.models import Job, JobState
from tests.conftest import count_jobs


class RollbackError(Exception):
    pass


def finish(job: Job, state: str) -> None:
    Job.objects.filter(pk=job.pk).update(state=state, finalized_at=timezone.now())


# --- one session ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_unique__duplicate_is_refused_naming_the_existing_job() -> None:
    first = Job.objects.enqueue("noop", {"user_id": 1}, unique=True)

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue("noop", {"user_id": 1}, unique=True)

    assert caught.value.existing_id == first.pk
    assert caught.value.existing_ids == [first.pk]
    assert caught.value.kind == "noop"
    assert caught.value.unique_key == first.unique_key
    assert f"job id {first.pk}" in str(caught.value)
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_unique__args_key_order_does_not_matter() -> None:
    Job.objects.enqueue("noop", {"a": 1, "b": 2}, unique=True)

    with pytest.raises(UniqueJobConflictError):
        Job.objects.enqueue("noop", {"b": 2, "a": 1}, unique=True)


@pytest.mark.django_db
def test_unique__different_args_or_kind_are_different_jobs() -> None:
    Job.objects.enqueue("noop", {"user_id": 1}, unique=True)
    Job.objects.enqueue("noop", {"user_id": 2}, unique=True)
    Job.objects.enqueue("test_unique_other_kind", {"user_id": 1}, unique=True)  # no handler: any args

    assert Job.objects.count() == 3


@pytest.mark.django_db
def test_unique__without_unique_duplicates_are_allowed() -> None:
    Job.objects.enqueue("noop", {"user_id": 1}, unique=True)
    Job.objects.enqueue("noop", {"user_id": 1})
    Job.objects.enqueue("noop", {"user_id": 1}, unique=False)

    assert Job.objects.count() == 3


@pytest.mark.django_db
def test_unique__by_args_false_ignores_the_args() -> None:
    Job.objects.enqueue("noop", {"user_id": 1}, unique={"by_args": False})

    with pytest.raises(UniqueJobConflictError):
        Job.objects.enqueue("noop", {"user_id": 2}, unique={"by_args": False})


@pytest.mark.django_db
def test_unique__queue_is_ignored_by_default() -> None:
    Job.objects.enqueue("noop", queue="a", unique=True)

    with pytest.raises(UniqueJobConflictError):
        Job.objects.enqueue("noop", queue="b", unique=True)


@pytest.mark.django_db
def test_unique__by_queue_distinguishes_queues() -> None:
    Job.objects.enqueue("noop", queue="a", unique={"by_queue": True})
    Job.objects.enqueue("noop", queue="b", unique={"by_queue": True})

    with pytest.raises(UniqueJobConflictError):
        Job.objects.enqueue("noop", queue="a", unique={"by_queue": True})
    assert sorted(Job.objects.values_list("queue", flat=True)) == ["a", "b"]


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["scheduled", "available", "running", "retryable"])
def test_unique__default_states_refuse_while_the_job_is_active(state: str) -> None:
    first = Job.objects.enqueue("noop", unique=True)
    Job.objects.filter(pk=first.pk).update(state=state)

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue("noop", unique=True)
    assert caught.value.existing_id == first.pk


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["completed", "failed", "cancelled"])
def test_unique__finished_job_allows_a_new_one(state: str) -> None:
    first = Job.objects.enqueue("noop", unique=True)
    finish(first, state)

    second = Job.objects.enqueue("noop", unique=True)

    assert second.pk != first.pk
    assert second.unique_key == first.unique_key
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_unique__states_including_completed_refuse_after_completion() -> None:
    unique = {"states": [*managers.ACTIVE_STATES, "completed"]}
    first = Job.objects.enqueue("noop", unique=unique)
    finish(first, "completed")

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue("noop", unique=unique)
    assert caught.value.existing_id == first.pk

    finish(first, "failed")  # not in its unique states: the key is free again
    Job.objects.enqueue("noop", unique=unique)
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_unique__states_are_stored_on_the_row() -> None:
    job = Job.objects.enqueue("noop", unique=UniqueOptions(states=(*managers.ACTIVE_STATES, "available", "failed")))

    assert Job.objects.get(pk=job.pk).unique_states == [*managers.ACTIVE_STATES, "failed"]
    assert Job.objects.get(pk=Job.objects.enqueue("sleep", unique=True).pk).unique_states == list(
        managers.ACTIVE_STATES
    )


@pytest.mark.django_db
def test_unique__future_run_at_duplicate_is_refused_while_scheduled() -> None:
    later = timezone.now() + timedelta(hours=1)
    first = Job.objects.enqueue("noop", run_at=later, unique=True)

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue("noop", unique=True)
    assert (first.state, caught.value.existing_id) == (JobState.SCHEDULED, first.pk)


@pytest.mark.django_db
def test_unique__by_period_allows_one_job_per_period(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [datetime(2030, 1, 1, 10, 0, 0, tzinfo=dt_timezone.utc)]
    monkeypatch.setattr("awa_django.managers.timezone.now", lambda: clock[0])
    hourly = {"by_period": 3600}

    first = Job.objects.enqueue("noop", unique=hourly)
    clock[0] = datetime(2030, 1, 1, 10, 59, 59, tzinfo=dt_timezone.utc)
    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue("noop", unique=hourly)
    assert caught.value.existing_id == first.pk

    clock[0] = datetime(2030, 1, 1, 11, 0, 0, tzinfo=dt_timezone.utc)
    Job.objects.enqueue("noop", unique=hourly)
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_unique__by_period_accepts_a_timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("awa_django.managers.timezone.now", lambda: datetime(2030, 1, 1, 10, 0, tzinfo=dt_timezone.utc))
    as_seconds = Job.objects.enqueue("noop", unique={"by_period": 60})

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue("noop", unique=UniqueOptions(by_period=timedelta(minutes=1)))
    assert caught.value.existing_id == as_seconds.pk


@pytest.mark.django_db
def test_unique__conflict_inside_atomic_leaves_the_transaction_usable() -> None:
    with transaction.atomic():
        first = Job.objects.enqueue("noop", unique=True)
        with pytest.raises(UniqueJobConflictError):
            Job.objects.enqueue("noop", unique=True)
        other = Job.objects.enqueue("sleep")

    assert set(Job.objects.values_list("pk", flat=True)) == {first.pk, other.pk}


# --- enqueue_many ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_enqueue_many__duplicate_within_the_call_writes_nothing() -> None:
    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue_many(
            [
                {"kind": "noop", "args": {"n": 1}, "unique": True},
                {"kind": "noop", "args": {"n": 2}, "unique": True},
                {"kind": "noop", "args": {"n": 1}, "unique": True},
            ]
        )

    assert caught.value.kind == "noop"
    assert caught.value.existing_ids == []  # the other one is in the same call: it has no id yet
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_unique__states_must_cover_every_waiting_state() -> None:
    # Enforcing in "available" only would let two scheduled duplicates collide at promotion,
    # inside the worker, where no caller would see the error.
    with pytest.raises(InvalidJobError) as caught:
        Job.objects.enqueue_many([{"kind": "noop", "unique": {"states": ["available"]}}])

    assert "unique.states" in str(caught.value)
    assert "scheduled" in str(caught.value) and "retryable" in str(caught.value)
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("flag", ["by_args", "by_queue"])
def test_unique__options_flags_must_be_bools_as_in_the_dict_form(flag: str) -> None:
    # UniqueOptions(by_queue="false") was taken as True (a truthy str); {"by_queue": "false"} is refused.
    with pytest.raises(InvalidJobError, match=rf"unique.{flag}='false': must be True or False"):
        Job.objects.enqueue("noop", unique=UniqueOptions(**{flag: "false"}))  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match=rf"unique.{flag}='false': must be True or False"):
        Job.objects.enqueue("noop", unique={flag: "false"})

    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_enqueue_many__conflict_with_an_existing_job_writes_nothing_and_names_it() -> None:
    existing = Job.objects.enqueue("noop", {"n": 1}, unique=True)

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue_many(
            [{"kind": "test_unique_other_kind", "args": {"n": 1}}, {"kind": "noop", "args": {"n": 1}, "unique": True}]
        )

    assert caught.value.existing_ids == [existing.pk]
    assert f"job id {existing.pk}" in str(caught.value)
    assert list(Job.objects.values_list("pk", flat=True)) == [existing.pk]


@pytest.mark.django_db
def test_enqueue_many__conflict_in_a_later_copy_batch_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    existing = Job.objects.enqueue("noop", {"n": 40}, unique=True)
    monkeypatch.setattr(managers, "COPY_BATCH_SIZE", 10)

    with pytest.raises(UniqueJobConflictError) as caught:
        Job.objects.enqueue_many({"kind": "noop", "args": {"n": n}, "unique": True} for n in range(50))

    assert caught.value.existing_ids == [existing.pk]
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_enqueue_many__conflict_inside_atomic_keeps_the_callers_earlier_writes() -> None:
    existing = Job.objects.enqueue("noop", unique=True)

    with transaction.atomic():
        earlier = Job.objects.enqueue("sleep")
        with pytest.raises(UniqueJobConflictError):
            Job.objects.enqueue_many([{"kind": "sleep"}, {"kind": "noop", "unique": True}])
        later = Job.objects.enqueue("sleep")

    assert set(Job.objects.values_list("pk", flat=True)) == {existing.pk, earlier.pk, later.pk}


# --- two sessions racing -----------------------------------------------------------------------


def backend_pid() -> int:
    connection.ensure_connection()
    return int(connection.connection.info.backend_pid)


def wait_until_blocked(observer: psycopg.Connection[Any], pid: int, by: int, timeout: float = 30.0) -> None:
    """Poll pg_blocking_pids until session ``pid`` waits on a lock held by session ``by``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = observer.execute("SELECT pg_blocking_pids(%s)", (pid,)).fetchone()
        if row is not None and by in row[0]:
            return
        time.sleep(0.01)
    raise AssertionError(f"session {pid} never blocked on session {by}")


class Session(threading.Thread):
    """Runs ``body`` in its own thread, on its own Django connection, in its own transaction."""

    def __init__(self, body: Callable[[Session], Any]) -> None:
        super().__init__(daemon=True)
        self.body = body
        self.pid = 0
        self.connected = threading.Event()
        self.inserted = threading.Event()
        self.release = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.pid = backend_pid()
            self.connected.set()
            self.result = self.body(self)
        except BaseException as exc:
            self.error = exc
        finally:
            self.connected.set()
            self.inserted.set()
            connection.close()

    def finish(self, timeout: float = 30.0) -> None:
        self.join(timeout)
        assert not self.is_alive(), "session did not finish"


def hold_open(enqueue: Callable[[], Job], *, commit: bool) -> Callable[[Session], Job]:
    """A session body: enqueue in a transaction, then keep it open until released; commit or roll back."""

    def body(session: Session) -> Job:
        with transaction.atomic():
            job = enqueue()
            session.inserted.set()
            assert session.release.wait(30), "never released"
            if not commit:
                transaction.set_rollback(True)
        return job

    return body


def race(
    other_connection: psycopg.Connection[Any],
    first: Callable[[], Job],
    second: Callable[[], Any],
    *,
    commit_first: bool,
) -> tuple[Session, Session]:
    """``first`` inserts and holds its transaction; ``second`` runs and must block on it; then release."""
    winner = Session(hold_open(first, commit=commit_first))
    winner.start()
    assert winner.inserted.wait(30)
    assert winner.error is None, winner.error

    def attempt(session: Session) -> Any:
        with transaction.atomic():
            return second()

    loser = Session(attempt)
    try:
        loser.start()
        assert loser.connected.wait(30)
        wait_until_blocked(other_connection, loser.pid, by=winner.pid)
        assert loser.is_alive()
    finally:
        winner.release.set()
    winner.finish()
    loser.finish()
    assert winner.error is None, winner.error
    return winner, loser


def test_unique_race__concurrent_enqueue_blocks_then_loses_naming_the_winner(
    other_connection: psycopg.Connection[Any],
) -> None:
    winner, loser = race(
        other_connection,
        lambda: Job.objects.enqueue("noop", {"user_id": 1}, unique=True),
        lambda: Job.objects.enqueue("noop", {"user_id": 1}, unique=True),
        commit_first=True,
    )

    assert isinstance(loser.error, UniqueJobConflictError), loser.error
    assert loser.error.existing_ids == [winner.result.pk]
    assert count_jobs(other_connection) == 1
    assert count_jobs(other_connection, id=winner.result.pk) == 1


def test_unique_race__concurrent_enqueue_wins_when_the_first_rolls_back(
    other_connection: psycopg.Connection[Any],
) -> None:
    _, loser = race(
        other_connection,
        lambda: Job.objects.enqueue("noop", {"user_id": 1}, unique=True),
        lambda: Job.objects.enqueue("noop", {"user_id": 1}, unique=True),
        commit_first=False,
    )

    assert loser.error is None, loser.error
    assert count_jobs(other_connection) == 1
    assert count_jobs(other_connection, id=loser.result.pk) == 1


def test_unique_race__concurrent_enqueue_many_loses_naming_the_winner(
    other_connection: psycopg.Connection[Any],
) -> None:
    winner, loser = race(
        other_connection,
        lambda: Job.objects.enqueue("noop", {"user_id": 1}, unique=True),
        lambda: Job.objects.enqueue_many([{"kind": "sleep"}, {"kind": "noop", "args": {"user_id": 1}, "unique": True}]),
        commit_first=True,
    )

    assert isinstance(loser.error, UniqueJobConflictError), loser.error
    assert loser.error.existing_ids == [winner.result.pk]
    assert count_jobs(other_connection) == 1
