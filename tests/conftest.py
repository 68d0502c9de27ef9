"""Shared fixtures. Tests run against a real PostgreSQL: the embedded server, or DATABASE_URL.

Every test is marked, at collection, by what it needs (``pytest -m pure`` runs without a database;
``-m "not subprocess"`` without starting any other process):

* ``subprocess``: it starts another process (the worker fixtures ``spawn``/``spawn_pooled``, the
  PgBouncer fixture, or a ``@pytest.mark.subprocess`` it carries itself because it calls
  ``subprocess`` directly);
* ``db``: it touches the database (a ``django_db`` mark, a fixture that depends on ``db`` or
  ``transactional_db``, or a Django ``TransactionTestCase``);
* ``pure``: neither. A ``pure`` test that starts a process fails, so the mark cannot lie; one that
  touches the database is already refused by pytest-django.

A job written on Django's connection joins the caller's transaction, so whether another session
can see it (or hears its NOTIFY) is only observable from a second connection: ``other_connection``
and ``listener`` open one with Django's own connection parameters, outside Django.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from awa_django.sql import JOBS_CHANNEL
from tests import hypothesis_profiles

# Before any test module is imported: every @settings(...) in the suite inherits the profile.
hypothesis_profiles.load()

# Bytecode caches on, whatever the environment says (these machines set PYTHONDONTWRITEBYTECODE):
# without them each pytest process rewrites the asserts of every test module again (collection
# took 64 s instead of 17 s here), and each awa_worker subprocess compiles the package again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Skips for a missing dependency fail the run under AWA_REQUIRE_ALL=1 (CI): see tests/skiprule.py.
pytest_plugins = ["tests.skiprule"]

# Django-only keys in get_connection_params() that psycopg.connect() does not take.
_DJANGO_ONLY = ("cursor_factory", "context", "prepare_threshold")


# Fixtures that reach the database, directly or through another fixture (``item.fixturenames``
# is the closure of what a test requests, so ``other_connection`` brings ``transactional_db``).
_DB_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_setup", "django_db_reset_sequences", "django_db_serialized_rollback"}
)
# Fixtures that start other processes: awa_worker subprocesses and a real PgBouncer.
_SUBPROCESS_FIXTURES = frozenset({"spawn", "spawn_pooled", "bouncer"})


def _needs_db(item: pytest.Item) -> bool:
    if item.get_closest_marker("django_db") is not None:
        return True
    if _DB_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    from django.test import TransactionTestCase

    cls = getattr(item, "cls", None)
    return cls is not None and issubclass(cls, TransactionTestCase)


SLOW_LIST = Path(__file__).with_name("slow.txt")


def slow_list() -> set[str]:
    """The node ids of tests/slow.txt: long tests the fast loop leaves out, chosen by measured time."""
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    hypothesis_profiles.scale_examples(items)
    listed = slow_list()
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
        spawns = item.get_closest_marker("subprocess") is not None or bool(
            _SUBPROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
        )
        if spawns and item.get_closest_marker("subprocess") is None:
            item.add_marker(pytest.mark.subprocess)
        if _needs_db(item):
            item.add_marker(pytest.mark.db)
        elif not spawns:
            item.add_marker(pytest.mark.pure)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> None:
    """pytest-django's test database (one per xdist process: ``test_awa_gw0``, ...), with
    ``synchronous_commit`` off for every session on it, worker subprocesses included.

    A commit then returns before its WAL reaches the disk: on this machine's disk that is about
    1 ms a commit instead of 8-11 ms, and the suite commits tens of thousands of times. Only a
    crash of the server itself could lose a commit, and no test crashes the shared server (the
    restart tests run their own, tests/privateserver.py). What every test observes, visibility
    and locking, is the same.
    """
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        statement = sql.SQL("ALTER DATABASE {} SET synchronous_commit TO off").format(
            sql.Identifier(connection.settings_dict["NAME"])
        )
        with connect_outside_django() as conn:
            conn.execute(statement)
        connection.close()  # Django's next session starts with the setting


# awa_worker run in-process (call_command) sets these loggers' levels for its verbosity; they
# outlive the test. A test that ran `-v 0` before another in the same process (any order, as
# under xdist) silenced the job lines the next one reads from caplog.
_PACKAGE_LOGGERS = ("awa_django", "awa_django.jobs")


@pytest.fixture(autouse=True)
def _package_log_levels_restored() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _PACKAGE_LOGGERS]
    saved = [(logger.level, list(logger.handlers)) for logger in loggers]
    yield
    for logger, (level, handlers) in zip(loggers, saved, strict=True):
        logger.setLevel(level)
        logger.handlers[:] = handlers


@pytest.fixture(autouse=True)
def _pure_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``pure`` that starts a process fails, naming the fix."""
    if request.node.get_closest_marker("pure") is None:
        return

    def refuse(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError(
            f"{request.node.nodeid} is marked pure but starts a process ({self.args!r}): "
            "mark it @pytest.mark.subprocess"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


def connection_params(dbname: str | None = None) -> dict[str, Any]:
    """psycopg.connect() keywords for the server Django's connection uses, password included (a
    connection's ``info.dsn`` leaves it out), on the test database or on ``dbname``."""
    params = {k: v for k, v in connection.get_connection_params().items() if k not in _DJANGO_ONLY}
    if dbname is not None:
        params["dbname"] = dbname
    return params


def connect_outside_django(dbname: str | None = None) -> psycopg.Connection[Any]:
    """A fresh autocommit psycopg connection to the database Django's connection uses (the test DB),
    or to ``dbname`` on the same server."""
    return psycopg.connect(**connection_params(dbname), autocommit=True)


@pytest.fixture
def other_connection(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A second session: it sees only what Django's connection has committed."""
    conn = connect_outside_django()
    try:
        yield conn
    finally:
        conn.close()


def count_jobs(conn: psycopg.Connection[Any], **where: Any) -> int:
    """Rows of awa_job matching ``column=value`` pairs, as seen by ``conn``."""
    clauses = [sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column)) for column in where]
    query = sql.SQL("SELECT count(*) FROM awa_job WHERE {}").format(
        sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("TRUE")
    )
    row = conn.execute(query, where).fetchone()
    assert row is not None
    return int(row[0])


class Listener:
    """A session LISTENing on the jobs channel.

    ``drain()`` sends a sentinel NOTIFY from yet another session and returns the payloads of
    every notification received before it. Postgres delivers notifications in commit order, so
    the sentinel bounds the read without guessing a timeout: whatever was committed before the
    call has been delivered when the sentinel arrives, and nothing committed later is counted.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        conn.execute(f"LISTEN {JOBS_CHANNEL}")

    def drain(self, timeout: float = 30.0) -> list[str]:
        sentinel = f"sentinel-{uuid.uuid4()}"
        with connect_outside_django() as sender:
            sender.execute("SELECT pg_notify(%s, %s)", (JOBS_CHANNEL, sentinel))
        payloads: list[str] = []
        for notify in self.conn.notifies(timeout=timeout):
            if notify.payload == sentinel:
                return payloads
            assert notify.channel == JOBS_CHANNEL
            payloads.append(notify.payload)
        raise AssertionError(f"the sentinel NOTIFY did not arrive within {timeout}s; got {payloads}")


@pytest.fixture
def listener(transactional_db: None) -> Iterator[Listener]:
    conn = connect_outside_django()
    try:
        listener = Listener(conn)
        listener.drain()  # starts from a clean slate
        yield listener
    finally:
        conn.close()
