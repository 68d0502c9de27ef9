"""Postgres access for the runtime: psycopg 3 async connections built from Django's DATABASES.

No ORM on the event loop. The pool serves claims, batched writes, heartbeats and snapshots;
LISTEN and the maintenance leader each hold a dedicated connection, so the budget per worker
process is POOL_SIZE + 2 connections; the leader, one worker at a time, holds two more while it
leads (its retention and history duties, worker/duty.py).

Behind a transaction pooler (AWA["POOLER"] = "transaction") no connection made here keeps session
state: psycopg never prepares (``prepare_threshold=None``, unless AWA["PREPARED_STATEMENTS"] says
the pooler keeps them), and the LISTEN connection goes to AWA["LISTEN_DATABASE_URL"], a direct
connection, when one is configured (the worker polls otherwise, see ``AwaSettings.listen_enabled``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa_django.conf import awa_settings
from awa_django.dbparams import LISTEN_PURPOSE, connection_kwargs, listen_kwargs

__all__ = [
    "LISTEN_PURPOSE",
    "TRANSIENT_ERRORS",
    "Backoff",
    "connect",
    "connection_kwargs",
    "listen_kwargs",
    "make_pool",
    "retrying",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# psycopg errors that mean "the server or the connection went away": retried with backoff.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
try:
    from psycopg_pool import PoolTimeout

    TRANSIENT_ERRORS += (PoolTimeout,)
except ImportError:  # pragma: no cover
    pass


async def connect(alias: str, purpose: str | None = None) -> psycopg.AsyncConnection[Any]:
    """A dedicated connection; ``purpose`` is appended to its application_name (``awa_worker:listen``)
    so operators (and tests) can tell it apart in pg_stat_activity."""
    kwargs = connection_kwargs(alias)
    if purpose is not None:
        kwargs["application_name"] = f"{kwargs['application_name']}:{purpose}"
    listen_url = awa_settings().LISTEN_DATABASE_URL
    if purpose == LISTEN_PURPOSE and listen_url:
        return await psycopg.AsyncConnection.connect(listen_url, **listen_kwargs(kwargs))
    conn = await psycopg.AsyncConnection.connect(**kwargs)
    await read_committed(conn)
    return conn


async def read_committed(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every transaction the runtime opens on ``conn`` begins READ COMMITTED, whatever the
    database's, the role's or OPTIONS["options"]'s default_transaction_isolation: the runtime's
    multi-statement transactions count on a new snapshot per statement (a capped key's claim counts
    its running rows after waiting for the key's lock: under repeatable read it counted them as
    they were before the wait, and the key ran past its cap). psycopg says so in each BEGIN, no
    session state, so it holds behind a transaction pooler too."""
    await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)


def make_pool(alias: str, size: int) -> AsyncConnectionPool:
    kwargs = connection_kwargs(alias)
    return AsyncConnectionPool(
        kwargs=kwargs,
        min_size=size,
        max_size=size,
        open=False,
        name="awa-worker",
        configure=read_committed,
        reconnect_timeout=24 * 3600.0,  # keep trying through a long outage; each failure is logged
    )


class Backoff:
    """Exponential backoff for reconnects: 0.05 s doubling to 5 s, reset on success."""

    def __init__(self, first: float = 0.05, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = first

    def next(self) -> float:
        delay = self.delay
        self.delay = min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.delay = self.first


async def retrying(what: str, operation: Callable[[], Awaitable[T]], *, attempts: int | None = None) -> T:
    """Run ``operation`` until it succeeds, retrying transient database errors with backoff."""
    backoff = Backoff()
    tries = 0
    while True:
        try:
            return await operation()
        except TRANSIENT_ERRORS as exc:
            tries += 1
            if attempts is not None and tries >= attempts:
                raise
            delay = backoff.next()
            logger.warning("database unavailable during %s, retrying in %.2fs error=%r", what, delay, exc)
            await asyncio.sleep(delay)
