"""Live reconfiguration: Queue rows edited in the admin apply to a running worker, no restart.

The rows are re-read on a NOTIFY on the queues channel (a save in the admin) and every
``reconfigure_interval`` as the fallback. New settings apply only if they pass the same rules as
at start (``Allocator.reconfigure`` validates them); otherwise the last good ones stay and the
refusal is logged once, with the rule it broke. A worker started with ``-q`` keeps to its queues;
otherwise a queue that appears in the table is served from then on. The new settings replace
``Runtime.config``; each queue's runner takes its own (``Runners.apply``).

Each tick also re-reads the served queues' fair-key settings (``read_key_settings``: the queue's
key defaults and its ``FairKey`` rows, one query) and hands them to the runners
(``Runners.apply_keys``), every tick: a key held back by a cap that another worker held is looked
at again then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from psycopg.rows import dict_row

from awa_django.concurrency.keyconfig import QueueKeySettings, settings_from_rows
from awa_django.exceptions import ConfigurationError
from awa_django.sql import statements
from awa_django.worker.config import QueueConfig
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)


class Reconfigurer:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.now = asyncio.Event()  # set: re-read at once instead of at the end of the interval
        self._last_refused: str | None = None

    def soon(self) -> None:
        self.now.set()

    async def run(self) -> None:
        """Re-read Queue rows on NOTIFY (a save in the admin) and every few seconds as a fallback."""
        runtime = self.runtime
        while not runtime.stop.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.now.wait(), runtime.config.reconfigure_interval)
            self.now.clear()
            if runtime.stop.stopping:
                return
            try:
                await self.reload_queues()
            except TRANSIENT_ERRORS as exc:
                logger.warning("could not re-read queue settings: %r", exc)

    async def reload_queues(self) -> bool:
        async with self.runtime.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["read_queues"])
            rows = {row["name"]: QueueConfig.from_row(row) for row in await cursor.fetchall()}
        changed = self.apply_queue_rows(rows)
        self.runtime.runners.apply_keys(await self.read_key_settings())
        return changed

    async def read_key_settings(self) -> dict[str, QueueKeySettings]:
        """The fair-key settings in force of every queue this worker serves."""
        names = list(self.runtime.config.queues)
        async with self.runtime.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["read_key_settings"], {"queues": names})
            rows = await cursor.fetchall()
        return settings_from_rows(names, rows)

    def apply_queue_rows(self, rows: dict[str, QueueConfig]) -> bool:
        """Apply new Queue settings if they pass the rules; otherwise keep the last good ones."""
        runtime = self.runtime
        current = runtime.config.host_settings()  # before the split of --processes, if any
        names = list(current) if runtime.config.fixed_queues else list(dict.fromkeys([*current, *rows]))
        wanted = {name: rows.get(name, current.get(name) or QueueConfig(name)) for name in names}
        if wanted == current:
            return False
        try:
            config = runtime.config.with_queues(wanted)
            runtime.allocator.reconfigure(config.global_max_workers, config.queues)
        except ConfigurationError as exc:
            if self._last_refused != str(exc):
                logger.error("refusing new queue settings, keeping the last good ones: %s", exc)
                self._last_refused = str(exc)
            return False
        self._last_refused = None
        runtime.config = config
        runtime.runners.apply(config.queues, serve_new=not runtime.stop.stopping)
        return True
