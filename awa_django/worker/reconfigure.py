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

The same tick reads the operators' requests to this worker first and acknowledges them last
(``awa_django.worker.control``): a queue held by request is applied here as if its row said
paused with ``min_workers`` 0, in this worker only (``control.with_holds``, after the split of
``--processes``); its own settings are kept beside, so a resume restores them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from psycopg.rows import dict_row

from awa_django.concurrency.keyconfig import QueueKeySettings, settings_from_rows
from awa_django.exceptions import ConfigurationError
from awa_django.sql import statements
from awa_django.worker.config import QueueConfig
from awa_django.worker.control import Control, with_holds
from awa_django.worker.db import TRANSIENT_ERRORS
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)


class Reconfigurer:
    def __init__(self, runtime: Runtime, control: Control | None = None) -> None:
        self.runtime = runtime
        self.control = control
        self.now = asyncio.Event()  # set: re-read at once instead of at the end of the interval
        self._last_refused: str | None = None
        # The queue settings as configured (the host's, before the split and before any hold).
        self._configured = dict(runtime.config.host_settings())
        self._applied_held: frozenset[str] = frozenset()  # the holds runtime.config has applied

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
                if self.control is not None:
                    await self.control.read()
                await self.reload_queues()
                if self.control is not None:
                    await self.control.acknowledge()
            except TRANSIENT_ERRORS as exc:
                logger.warning("could not re-read queue settings or operator requests: %r", exc)

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
        current = self._configured  # before the split of --processes, if any, and before holds
        held = self.control.held if self.control is not None else frozenset()
        names = list(current) if runtime.config.fixed_queues else list(dict.fromkeys([*current, *rows]))
        wanted = {name: rows.get(name, current.get(name) or QueueConfig(name)) for name in names}
        if wanted == current and held == self._applied_held:
            return False
        try:
            config = runtime.config.with_queues(wanted)
            config = replace(config, queues=with_holds(config.queues, held))
            # In capacity scope "cluster" the allocator runs hard-reserved style on the leader's
            # caps whatever the mode (as the supervisor built it), so it is reconfigured that way.
            scoped_max = None if config.capacity_scope == "cluster" else config.global_max_workers
            runtime.allocator.reconfigure(scoped_max, config.queues)
        except ConfigurationError as exc:
            if self._last_refused != str(exc):
                logger.error("refusing new queue settings, keeping the last good ones: %s", exc)
                self._last_refused = str(exc)
            return False
        self._last_refused = None
        self._configured, self._applied_held = wanted, held
        runtime.config = config
        runtime.runners.apply(config.queues, serve_new=not runtime.stop.stopping)
        return True
