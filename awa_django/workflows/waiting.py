"""Awaiting a job's result from ordinary code: ``wait(job_id, timeout)`` / ``await await_result(...)``
(also ``Job.wait`` / ``Job.await_result``).

With LISTEN on (``AWA["LISTEN"]``; behind a transaction pooler only with
``AWA["LISTEN_DATABASE_URL"]``, a direct connection), the waiter opens its own connection,
registers the job in ``awa_job_waiter`` (autocommit: the finalising statement must see it),
LISTENs on ``awa_done`` and reads the row: the statement that ends the job NOTIFYs that channel
with the job id, but only for jobs someone registered: for plain jobs the ending statement's
release call probes an (almost always empty) unlogged table by key, and sends nothing. A
registration made while the ending statement was already running can be missed, so the row is
read again as well, 10 ms after the first read and then twice as long each time, up to every
``RECHECK`` seconds: a short job whose NOTIFY was missed costs milliseconds, a long one a read
every half second. With LISTEN off the row is polled, from 10 ms backing off to ``POLL_MAX``.

``wait`` runs on Django's own connection when the caller is in autocommit outside any atomic
block and the server is reached directly (a connect costs tens of milliseconds, and a short job
ends sooner): it LISTENs there and UNLISTENs before it returns. Otherwise (inside a transaction,
which would not see a commit made after its snapshot and must not be held open; behind a
transaction pooler) it opens a connection of its own, as ``await_result`` always does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import psycopg
from django.db import connections
from psycopg import sql
from psycopg.pq import TransactionStatus

from awa_django.conf import awa_settings
from awa_django.exceptions import AwaError
from awa_django.sql import DONE_CHANNEL, statements
from awa_django.states import JobState

RECHECK = 0.5  # at most this many seconds between reads of the row while LISTENing
POLL_FIRST = 0.01
POLL_MAX = 0.5
_LISTEN = sql.SQL("LISTEN {}").format(sql.Identifier(DONE_CHANNEL))
_UNLISTEN = sql.SQL("UNLISTEN {}").format(sql.Identifier(DONE_CHANNEL))


class JobFailedError(AwaError):
    """The awaited job ended failed or cancelled; ``error`` is its last error entry's text."""

    def __init__(self, job_id: int, state: str, error: str | None) -> None:
        self.job_id = job_id
        self.state = state
        self.error = error
        super().__init__(f"job {job_id} ended {state}: {error or 'no error recorded'}")


class JobMissingError(AwaError, LookupError):
    """The awaited job does not exist (never committed, or deleted)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id} does not exist: it was deleted, or its enqueue has not committed "
            "(wait after the enqueuing transaction commits, e.g. in transaction.on_commit)"
        )


def _conninfo(alias: str) -> tuple[str, dict[str, Any]]:
    """The waiter's connection: LISTEN_DATABASE_URL when set (direct, behind a pooler), else the alias."""
    from awa_django.dbparams import connection_kwargs, listen_kwargs

    kwargs = connection_kwargs(alias)
    kwargs["application_name"] = f"{kwargs.get('application_name', 'awa')}:wait"
    url = awa_settings().LISTEN_DATABASE_URL
    if url and awa_settings().listen_enabled:
        return url, listen_kwargs(kwargs)
    return "", kwargs


def _outcome(job_id: int, row: tuple[Any, ...] | None) -> tuple[bool, Any]:
    """(ended, result) from read_job_outcome's row; JobFailedError / JobMissingError as they apply."""
    if row is None:
        raise JobMissingError(job_id)
    state, result, error = row
    if state == JobState.COMPLETED:
        return True, result
    if state in (JobState.FAILED, JobState.CANCELLED):
        raise JobFailedError(job_id, state, error)
    return False, None


def _timed_out(job_id: int, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"job {job_id} did not end within {timeout} s; it keeps running (wait again, or cancel it)")


def wait(job_id: int, timeout: float | None = None, *, using: str | None = None) -> Any:
    """Block until job ``job_id`` ends; return its result (None if it returned none).

    Raises JobFailedError (failed or cancelled, with its last error), JobMissingError, or
    TimeoutError after ``timeout`` seconds (None: no limit).
    """
    alias = using or awa_settings().DATABASE_ALIAS
    deadline = None if timeout is None else time.monotonic() + timeout
    borrowed = _borrowable(alias)
    if borrowed is not None:
        return _wait_on(borrowed, job_id, timeout, deadline, text_json=True)
    url, kwargs = _conninfo(alias)
    with psycopg.Connection.connect(url, **kwargs) as conn:
        return _wait_on(conn, job_id, timeout, deadline, text_json=False)


def _borrowable(alias: str) -> psycopg.Connection[Any] | None:
    """Django's own connection of ``alias``, when the wait may run on it instead of a new one (a
    connect costs tens of milliseconds; a job often ends sooner): in autocommit and outside any
    atomic block (a snapshot taken before the job ended would never see it end), idle, and straight
    to the server (behind a transaction pooler LISTEN needs ``LISTEN_DATABASE_URL``'s connection).
    Otherwise None: the waiter opens its own."""
    settings = awa_settings()
    if settings.transaction_pooler or (settings.LISTEN_DATABASE_URL and settings.listen_enabled):
        return None
    wrapper = connections[alias]
    if wrapper.in_atomic_block or not wrapper.get_autocommit():
        return None
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection) or raw.info.transaction_status != TransactionStatus.IDLE:
        return None
    return raw


def _wait_on(
    conn: psycopg.Connection[Any], job_id: int, timeout: float | None, deadline: float | None, *, text_json: bool
) -> Any:
    """``wait`` on ``conn``; ``text_json``: its jsonb arrives as text (Django's connection), parse it.
    LISTEN and the registration are undone before it returns, so a borrowed connection is left as
    it was."""
    listening = awa_settings().listen_enabled
    token = uuid.uuid4().hex
    if listening:
        conn.execute(statements["register_job_waiter"], {"id": job_id, "token": token})
        conn.execute(_LISTEN)
    try:
        pause = POLL_FIRST
        while True:
            row = conn.execute(statements["read_job_outcome"], {"id": job_id}).fetchone()
            ended, result = _outcome(job_id, row)
            if ended:
                return json.loads(result) if text_json and isinstance(result, str) else result
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _timed_out(job_id, timeout)
            step = pause if left is None else min(pause, left)
            pause = min(pause * 2, RECHECK if listening else POLL_MAX)
            if listening:
                for _ in conn.notifies(timeout=step, stop_after=1):
                    pass  # any awa_done: read the row again (payloads of other jobs cost one read)
            else:
                time.sleep(step)
    finally:
        if listening and not conn.closed:
            conn.execute(_UNLISTEN)
            conn.execute(statements["unregister_job_waiter"], {"id": job_id, "token": token})


async def await_result(
    job_id: int,
    timeout: float | None = None,  # noqa: ASYNC109 - the same signature as wait()
    *,
    using: str | None = None,
) -> Any:
    """``wait`` for async code: the same rules, on an async connection."""
    alias = using or awa_settings().DATABASE_ALIAS
    deadline = None if timeout is None else time.monotonic() + timeout
    from asgiref.sync import sync_to_async

    url, kwargs = await sync_to_async(_conninfo)(alias)
    listening = awa_settings().listen_enabled
    token = uuid.uuid4().hex
    async with await psycopg.AsyncConnection.connect(url, **kwargs) as conn:
        if listening:
            await conn.execute(statements["register_job_waiter"], {"id": job_id, "token": token})
            await conn.execute(_LISTEN)
        try:
            pause = POLL_FIRST
            while True:
                cursor = await conn.execute(statements["read_job_outcome"], {"id": job_id})
                ended, result = _outcome(job_id, await cursor.fetchone())
                if ended:
                    return result
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise _timed_out(job_id, timeout)
                step = pause if left is None else min(pause, left)
                pause = min(pause * 2, RECHECK if listening else POLL_MAX)
                if listening:
                    async for _ in conn.notifies(timeout=step, stop_after=1):
                        pass
                else:
                    await asyncio.sleep(step)
        finally:
            if listening and not conn.closed:
                await conn.execute(statements["unregister_job_waiter"], {"id": job_id, "token": token})
