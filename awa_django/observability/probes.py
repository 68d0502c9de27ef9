"""Liveness and readiness of a worker process, for ``GET /healthz`` and ``GET /readyz``.

The facts are gathered on the worker's event loop by ``Probes.run`` and read by the HTTP
server's thread (``endpoints``), which never touches the loop or the database: a probe answers
even while the loop is stuck, and says so.

- Liveness (``/healthz``): the loop turns. ``run`` stamps the time every ``TICK`` seconds; a
  stamp older than ``LIVENESS_TIMEOUT`` means the loop is blocked (an ``async def`` handler
  that never awaits, a deadlock) and the answer is 503. Before the loop first ticks (the
  command still waiting for the database, within ``--wait-for-database``) it is 200, "starting".
- Readiness (``/readyz``): the worker started and is not draining (stopping after
  SIGTERM/SIGINT), the database answers through the worker's own pool within
  ``CHECK_TIMEOUT``, and every migration of the awa app the code has is applied; the answer
  also says whether wake-ups come by LISTEN or by polling (either serves: a worker whose LISTEN
  connection is down polls). The database is checked every ``CHECK_EVERY`` seconds; a check
  older than ``CHECK_STALE`` (the loop stopped checking) is not ready either.

Everything the checks read is the worker's public surface: ``ready``, ``stopping``, ``flags()``
and ``pool`` (``ProbeHost``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool

from awa_django.snapshot import WorkerFlags
from awa_django.sql import statements

logger = logging.getLogger(__name__)

APP_LABEL = "awa"
TICK = 1.0  # seconds between the loop's liveness stamps
LIVENESS_TIMEOUT = 10.0  # a stamp older than this: the loop is not turning
CHECK_EVERY = 2.0  # seconds between database checks
CHECK_TIMEOUT = 5.0  # a pool connection and the query, at most this long
CHECK_STALE = CHECK_EVERY + CHECK_TIMEOUT + LIVENESS_TIMEOUT  # an older check says nothing now


class ProbeHost(Protocol):
    """What the probes read of the worker."""

    ready: asyncio.Event

    @property
    def stopping(self) -> bool: ...

    @property
    def pool(self) -> AsyncConnectionPool: ...

    def flags(self) -> WorkerFlags: ...


@dataclass(frozen=True, slots=True)
class Check:
    """One readiness check's findings, replaced whole (the HTTP thread reads one reference)."""

    at: float  # time.monotonic() when made
    started: bool
    stopping: bool
    listening: bool
    database_error: str | None = None  # None: the database answered
    missing_migrations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]

    def encoded(self) -> bytes:
        return json.dumps(self.body, sort_keys=True).encode()


@dataclass
class Probes:
    """The facts behind the two probes. ``expected_migrations``: the awa migrations the code has
    (``expected_migrations()``); ``clock``: ``time.monotonic`` unless a test passes another."""

    expected_migrations: frozenset[str]
    ticked_at: float | None = None
    check: Check | None = None
    clock: Any = field(default=time.monotonic)

    # --- on the worker's loop ----------------------------------------------------------------

    async def run(self, host: ProbeHost) -> None:
        """Stamp liveness every TICK seconds and check readiness every CHECK_EVERY, until cancelled."""
        next_check = self.clock()
        while True:
            now = self.clock()
            self.ticked_at = now
            if now >= next_check:
                try:
                    self.check = await self.inspect(host)
                except Exception as exc:  # a fault of the check itself: not ready, and said why
                    logger.exception("readiness check failed")
                    self.check = Check(
                        at=self.clock(),
                        started=host.ready.is_set(),
                        stopping=host.stopping,
                        listening=False,
                        database_error=f"the check itself failed: {exc!r}",
                    )
                next_check = self.clock() + CHECK_EVERY
            await asyncio.sleep(TICK)

    async def inspect(self, host: ProbeHost) -> Check:
        """The readiness facts now (the database read through the worker's pool)."""
        started = host.ready.is_set()
        flags = host.flags()
        check = Check(at=self.clock(), started=started, stopping=flags.stopping, listening=flags.listening)
        if not started:  # the pool may not be open yet
            return check
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                async with host.pool.connection(timeout=CHECK_TIMEOUT) as conn:
                    cursor = await conn.execute(statements["read_applied_migrations"], {"app": APP_LABEL})
                    applied = {row[0] for row in await cursor.fetchall()}
        except psycopg.errors.UndefinedTable:
            return replace(check, missing_migrations=tuple(sorted(self.expected_migrations)))
        except (TimeoutError, psycopg.Error) as exc:  # psycopg_pool's PoolTimeout is a psycopg.Error too
            error = " ".join(str(exc).split())[:300] or type(exc).__name__
            logger.warning("readiness: database check failed error=%s", error)
            return replace(check, database_error=error)
        return replace(check, missing_migrations=tuple(sorted(self.expected_migrations - applied)))

    # --- on the HTTP thread ----------------------------------------------------------------

    def liveness(self) -> Answer:
        ticked_at = self.ticked_at
        if ticked_at is None:
            return Answer(200, {"status": "starting"})
        age = self.clock() - ticked_at
        if age > LIVENESS_TIMEOUT:
            return Answer(
                503,
                {"status": "stuck", "loop_last_turned_seconds_ago": round(age, 3), "timeout": LIVENESS_TIMEOUT},
            )
        return Answer(200, {"status": "ok", "loop_last_turned_seconds_ago": round(age, 3)})

    def readiness(self) -> Answer:
        check = self.check
        if check is None:
            return Answer(503, {"status": "starting", "problems": ["the worker has not started"]})
        age = self.clock() - check.at
        problems = []
        if age > CHECK_STALE:
            problems.append(f"the last check is {age:.1f}s old: the worker's loop stopped checking")
        if not check.started:
            problems.append("the worker has not started")
        if check.stopping:
            problems.append("the worker is draining (stopping): it claims no new jobs")
        if check.database_error is not None:
            problems.append(f"the database does not answer: {check.database_error}")
        if check.missing_migrations:
            problems.append(
                f"migrations not applied: {', '.join(check.missing_migrations)} (run python manage.py migrate)"
            )
        body: dict[str, Any] = {
            "status": "ok" if not problems else "unavailable",
            "wakeups": "listen" if check.listening else "poll",
            "checked_seconds_ago": round(age, 3),
        }
        if problems:
            body["problems"] = problems
        return Answer(503 if problems else 200, body)


def expected_migrations(app_label: str = APP_LABEL, names: Iterable[tuple[str, str]] | None = None) -> frozenset[str]:
    """The leaf migrations of ``app_label`` as the code on disk has them (no database read): a
    database where these are applied has every migration before them too."""
    if names is None:
        from django.db.migrations.loader import MigrationLoader

        names = MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes(app_label)
    return frozenset(name for app, name in names if app == app_label)
