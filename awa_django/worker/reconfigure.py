"""Live reconfiguration: Queue rows edited in the admin apply to a running worker, no restart.

The rows are re-read on a NOTIFY on the queues channel (a save in the admin) and every
``reconfigure_interval`` as the fallback. New settings apply only if they pass the same rules as
at start (``Allocator.reconfigure`` validates them); otherwise the last good ones stay and the
refusal is logged once, with the rule it broke. A worker started with ``-q`` keeps to its queues;
otherwise a queue that appears in the table is served from then on.

The loop meets the supervisor through ``ReconfigureHost``, a narrow door.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator
from awa_django.exceptions import ConfigurationError
from awa_django.sql import statements
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.dispatcher import Dispatcher

logger = logging.getLogger(__name__)


class ReconfigureHost(Protocol):
    """What live reconfiguration needs from the worker (it replaces ``config`` when rows change)."""

    config: WorkerConfig
    allocator: Allocator
    pool: AsyncConnectionPool
    stopping: bool

    @property
    def dispatchers(self) -> Mapping[str, Dispatcher]: ...

    def start_dispatcher(self, queue: QueueConfig) -> Dispatcher:
        """Serve a queue that was not served before."""
        ...

    def wake_waiting(self) -> None: ...


class Reconfigurer:
    def __init__(self, host: ReconfigureHost) -> None:
        self.host = host
        self.now = asyncio.Event()  # set: re-read at once instead of at the end of the interval
        self._last_refused: str | None = None

    def soon(self) -> None:
        self.now.set()

    async def run(self) -> None:
        """Re-read Queue rows on NOTIFY (a save in the admin) and every few seconds as a fallback."""
        host = self.host
        while not host.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.now.wait(), host.config.reconfigure_interval)
            self.now.clear()
            if host.stopping:
                return
            try:
                await self.reload_queues()
            except TRANSIENT_ERRORS as exc:
                logger.warning("could not re-read queue settings: %r", exc)

    async def reload_queues(self) -> bool:
        async with self.host.pool.connection() as conn:
            cursor = await conn.execute(statements["read_queues"])
            names = [d.name for d in cursor.description or []]
            rows = {r[0]: QueueConfig.from_row(dict(zip(names, r, strict=True))) for r in await cursor.fetchall()}
        return self.apply_queue_rows(rows)

    def apply_queue_rows(self, rows: dict[str, QueueConfig]) -> bool:
        """Apply new Queue settings if they pass the rules; otherwise keep the last good ones."""
        host = self.host
        current = host.config.queues
        names = list(current) if host.config.fixed_queues else list(dict.fromkeys([*current, *rows]))
        wanted = {name: rows.get(name, current.get(name) or QueueConfig(name)) for name in names}
        if wanted == current:
            return False
        try:
            host.allocator.reconfigure(host.config.global_max_workers, wanted)
        except ConfigurationError as exc:
            if self._last_refused != str(exc):
                logger.error("refusing new queue settings, keeping the last good ones: %s", exc)
                self._last_refused = str(exc)
            return False
        self._last_refused = None
        host.config = host.config.with_queues(wanted)
        for name, queue in wanted.items():
            if name in host.dispatchers:
                if host.dispatchers[name].config != queue:
                    logger.info("queue settings changed queue=%s %s", name, queue)
                    host.dispatchers[name].apply(queue)
            elif not host.stopping:
                logger.info("serving new queue queue=%s", name)
                host.start_dispatcher(queue).nudge()
        host.wake_waiting()  # new weights or floors may let a waiting queue take a permit now
        return True
