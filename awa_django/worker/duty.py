"""The maintenance leader's slow duties, each on a task and a connection of its own (issue 43).

Retention and the history rollup can each take seconds to minutes (a day of finished jobs to
delete, a new leader's catch-up). Run in the leader's round, they held up what must keep its
cadence: promotion of due jobs, rescue, schedules. A ``Duty`` runs one of them beside the round:

- It runs only while its worker leads. Leadership is decided by the election on the leader's main
  connection alone; the leader starts its duties when it gains the leadership and stops them
  (cancelling the statement in flight, closing the connection) when it loses it or stops. A duty
  also asks ``leading()`` before every step, so no step starts after the leadership went.
- A step is one unit of the duty's work (one retention sweep, one rollup round) and returns how
  long to wait before the next one (0: at once, e.g. a rollup still catching up).
- A step that fails is logged and tried again one ``period`` later; a lost connection is reopened
  with ``Backoff``. Neither ends the duty, and neither reaches the leader's round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from awa_django.worker.db import TRANSIENT_ERRORS, Backoff, connect
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)

__all__ = ["Duty", "Step"]

# One unit of a duty's work on its connection; returns the seconds to wait before the next one.
Step = Callable[[psycopg.AsyncConnection[Any]], Awaitable[float]]


class Duty:
    def __init__(self, name: str, runtime: Runtime, step: Step, *, leading: Callable[[], bool], period: float) -> None:
        self.name = name
        self.runtime = runtime
        self.step = step
        self.leading = leading
        self.period = period  # seconds before a failed step is tried again
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.task: asyncio.Task[None] | None = None
        self.steps = 0  # steps that completed, since the worker started

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self) -> None:
        """Start the duty's task (the leader just gained the leadership); no-op if it runs."""
        if not self.running:
            self.task = asyncio.create_task(self._run(), name=f"awa-maintenance-{self.name}")

    async def stop(self) -> None:
        """Cancel the task (and with it the statement in flight) and close the connection."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None

    async def _run(self) -> None:
        runtime = self.runtime
        backoff = Backoff()
        while self.leading() and not runtime.stop.stopping:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = await connect(runtime.config.database_alias, purpose=f"maintenance-{self.name}")
                delay = await self.step(self.conn)
                self.steps += 1
                backoff.reset()
            except TRANSIENT_ERRORS as exc:
                logger.warning("maintenance %s lost its connection: %r", self.name, exc)
                if self.conn is not None:
                    with contextlib.suppress(Exception):
                        await self.conn.close()
                    self.conn = None
                delay = backoff.next()
            except Exception as exc:
                # A statement the database refused (a constraint, a timeout), or a bug: say so and
                # try again next period; the leader's round and the worker's jobs go on meanwhile.
                logger.error("maintenance %s failed, next try in %.0fs: %r", self.name, self.period, exc, exc_info=exc)
                delay = self.period
            await runtime.stop.sleep(delay)
