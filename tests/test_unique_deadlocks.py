"""Unique keys taken by two transactions at once: bulk enqueues (enqueue_many, a workflow's
enqueue) never deadlock each other, and a deadlock Postgres does find between enqueues is a
UniqueJobDeadlockError naming the keys.

Two real sessions (threads, each on its own Django connection) race on the real database. Every
step that must wait is seen waiting in ``pg_blocking_pids`` before the test goes on; outcomes are
read from what each session raised and what the database holds afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection, transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.errors import DeadlockDetected

from awa_django import UniqueJobDeadlockError
from awa_django.exceptions import UniqueJobConflictError
from awa_django.models import Job
from awa_django.workflows import Workflow
from tests.harness import wait_until

KEYS = [f"k{n}" for n in range(6)]


def unique_spec(key: str, place: int) -> dict[str, Any]:
    """A unique job whose key is ``key``'s; ``place`` (its index in its call) rides in metadata,
    which the unique key does not cover."""
    return {"kind": "noop", "args": {"key": key}, "unique": True, "metadata": {"place": place}}


class Session(threading.Thread):
    """``body`` in its own thread, on its own Django connection; its error, if any, is kept."""

    def __init__(self, body: Callable[[Session], Any]) -> None:
        super().__init__(daemon=True)
        self.body = body
        self.pid = 0
        self.started_up = threading.Event()
        self.holding = threading.Event()  # the body reached its hold point
        self.go = threading.Event()  # the test lets the body past its hold point
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection.ensure_connection()
            self.pid = int(connection.connection.info.backend_pid)
            self.started_up.set()
            self.body(self)
        except BaseException as exc:  # kept for the test to assert on
            self.error = exc
        finally:
            self.started_up.set()
            self.holding.set()
            connection.close()

    def hold(self) -> None:
        self.holding.set()
        assert self.go.wait(30), "never let go"

    def finish(self) -> None:
        self.go.set()
        self.join(30)
        assert not self.is_alive(), f"session {self.pid} did not finish"


def start(body: Callable[[Session], Any]) -> Session:
    session = Session(body)
    session.start()
    assert session.started_up.wait(30)
    return session


def blockers(observer: psycopg.Connection[Any], session: Session) -> list[int]:
    row = observer.execute("SELECT pg_blocking_pids(%s)", (session.pid,)).fetchone()
    assert row is not None
    return list(row[0])


def stored(observer: psycopg.Connection[Any]) -> list[tuple[str, int]]:
    """Each job's key and place in its call, in id order."""
    rows = observer.execute("SELECT args->>'key', (metadata->>'place')::int FROM awa_job ORDER BY id").fetchall()
    return [(key, place) for key, place in rows]


def is_deadlock(error: BaseException | None) -> bool:
    return isinstance(error, UniqueJobDeadlockError | DeadlockDetected) or (
        isinstance(error, OperationalError) and isinstance(error.__cause__, DeadlockDetected)
    )


# --- bulk against bulk (enqueue_many, a workflow): never a deadlock ----------------------------


def in_bulk(keys: list[str]) -> None:
    Job.objects.enqueue_many([unique_spec(key, place) for place, key in enumerate(keys)])


def in_a_workflow(keys: list[str]) -> None:
    """The keys as the steps of one workflow, none after another: their ids follow the steps' order."""
    wf = Workflow("keys")
    for place, key in enumerate(keys):
        wf.add("noop", {"key": key}, unique=True, metadata={"place": place})
    wf.enqueue()


Bulk = Callable[[list[str]], None]
BULK_WAYS = pytest.mark.parametrize(
    "ways",
    [(in_bulk, in_bulk), (in_a_workflow, in_a_workflow), (in_bulk, in_a_workflow)],
    ids=["enqueue_many-enqueue_many", "workflow-workflow", "enqueue_many-workflow"],
)


def bulk_race(
    observer: psycopg.Connection[Any],
    first: list[str],
    second: list[str],
    held: str,
    ways: tuple[Bulk, Bulk] = (in_bulk, in_bulk),
) -> list[Session]:
    """A third session holds ``held`` (a key of both lists) uncommitted while the two calls start;
    once each call waits (for it, or for the other call) or has ended, it rolls back."""
    observer.execute("DELETE FROM awa_job")
    observer.execute("DELETE FROM awa_workflow")

    def holder(session: Session) -> None:
        with transaction.atomic():
            Job.objects.enqueue_many([unique_spec(held, -1)])
            session.hold()
            transaction.set_rollback(True)

    def call(bulk: Bulk, keys: list[str]) -> Callable[[Session], None]:
        def body(session: Session) -> None:
            with transaction.atomic():
                bulk(keys)

        return body

    blocker = start(holder)
    assert blocker.holding.wait(30)
    calls = [start(call(ways[0], first)), start(call(ways[1], second))]
    try:
        for session in calls:
            wait_until(
                lambda s=session: not s.is_alive() or blockers(observer, s),  # type: ignore[misc]
                what=f"session {session.pid} waits or ends",
            )
    finally:
        blocker.finish()
        for session in calls:
            session.finish()
    assert blocker.error is None, blocker.error
    return calls


@st.composite
def overlapping_calls(draw: st.DrawFn) -> tuple[list[str], list[str], str]:
    """Two calls' keys, each in its caller's order, sharing at least one key, and a shared key to hold."""
    first = draw(st.lists(st.sampled_from(KEYS), min_size=1, unique=True))
    second = draw(st.lists(st.sampled_from(KEYS), min_size=1, unique=True).filter(lambda s: bool(set(s) & set(first))))
    held = draw(st.sampled_from(sorted(set(first) & set(second))))
    return first, second, held


@given(overlapping_calls())
# Each call takes its first key, waits for the held one, then wants the other's first key.
@example(calls=(["k0", "k1", "k2"], ["k2", "k1", "k0"], "k1"))
@example(calls=(["k3", "k0", "k5", "k1"], ["k1", "k5", "k0", "k3"], "k5"))
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@BULK_WAYS
def test_bulk_race__any_two_orders_of_overlapping_keys_never_deadlock(
    other_connection: psycopg.Connection[Any],
    ways: tuple[Bulk, Bulk],
    calls: tuple[list[str], list[str], str],
) -> None:
    first, second, held = calls

    sessions = bulk_race(other_connection, first, second, held, ways)

    assert not any(is_deadlock(s.error) for s in sessions), [s.error for s in sessions]
    # The held key's rollback frees it; the first call to take it then takes all its keys and
    # commits, and the other, waiting on one of them, is refused for a key the winner holds.
    winners = [keys for keys, s in zip((first, second), sessions, strict=True) if s.error is None]
    losers = [s.error for s in sessions if s.error is not None]
    assert len(winners) == 1, [s.error for s in sessions]
    assert len(losers) == 1 and isinstance(losers[0], UniqueJobConflictError), losers
    # The winner's jobs, and only those, with ids in its caller's order (its keys were written in
    # key order).
    assert stored(other_connection) == [(key, place) for place, key in enumerate(winners[0])]


@pytest.mark.django_db
def test_enqueue_many__unique_rows_out_of_key_order_keep_the_callers_id_order() -> None:
    specs: list[dict[str, Any]] = [unique_spec(key, place) for place, key in enumerate(["k4", "k1", "k5", "k0"])]
    specs.insert(2, {"kind": "noop", "args": {"key": "plain"}, "metadata": {"place": 99}})

    assert Job.objects.enqueue_many(specs) == 5

    in_id_order = [(job.args["key"], job.metadata["place"]) for job in Job.objects.order_by("id")]
    assert in_id_order == [("k4", 0), ("k1", 1), ("plain", 99), ("k5", 2), ("k0", 3)]
    assert len({job.unique_key for job in Job.objects.exclude(unique_key=None)}) == 4


# --- opposite orders across statements: Postgres' deadlock, named ----------------------------


def enqueue_one(key: str) -> None:
    Job.objects.enqueue("noop", {"key": key}, unique=True, metadata={"place": 0})


def enqueue_in_bulk(key: str) -> None:
    Job.objects.enqueue_many([unique_spec(key, 0)])


@pytest.mark.parametrize("second_step", [enqueue_one, enqueue_in_bulk], ids=["enqueue", "enqueue_many"])
def test_unique_race__opposite_orders_deadlock_as_a_named_error_and_the_other_commits(
    other_connection: psycopg.Connection[Any], second_step: Callable[[str], None]
) -> None:
    # T1 takes a then b; T2 takes b then a. T1 is seen waiting for T2 before T2 asks for a.
    def transaction_of(mine: str, theirs: str) -> Callable[[Session], None]:
        def body(session: Session) -> None:
            with transaction.atomic():
                enqueue_one(mine)
                session.hold()
                second_step(theirs)

        return body

    t1, t2 = start(transaction_of("a", "b")), start(transaction_of("b", "a"))
    try:
        assert t1.holding.wait(30) and t2.holding.wait(30)
        assert (t1.error, t2.error) == (None, None)
        t1.go.set()
        wait_until(lambda: t2.pid in blockers(other_connection, t1), what="T1 waits for T2's key b")
        t2.go.set()
    finally:
        t1.finish()
        t2.finish()

    errors = [s.error for s in (t1, t2) if s.error is not None]
    assert len(errors) == 1, (t1.error, t2.error)
    [error] = errors
    assert isinstance(error, UniqueJobDeadlockError)
    assert isinstance(error, OperationalError)  # what an `except OperationalError` written before catches
    assert isinstance(error.__cause__, DeadlockDetected)
    asked_for = "b" if error is t1.error else "a"  # the key the victim was enqueuing when aborted
    [(key_of_it,)] = other_connection.execute(
        "SELECT unique_key FROM awa_job WHERE args->>'key' = %s", (asked_for,)
    ).fetchall()
    assert error.unique_keys == [key_of_it]
    assert key_of_it in str(error)
    assert "consistent order" in str(error) and "retry the transaction" in str(error)
    # The other transaction got both keys and committed; nothing of the victim's is left.
    assert sorted(key for key, _ in stored(other_connection)) == ["a", "b"]
    survivor = t2 if error is t1.error else t1
    assert survivor.error is None
