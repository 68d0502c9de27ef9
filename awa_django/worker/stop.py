"""The worker's stop, as every loop sees it: graceful first, forced on a second request.

The supervisor decides when to stop (``begin``, ``force``); every loop reads ``stopping`` and
sleeps through ``sleep``, which gives way to the stop at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any


class Stop:
    def __init__(self) -> None:
        self._stopping = False
        self._forced = False
        self._event = asyncio.Event()
        self._forced_event = asyncio.Event()

    @property
    def stopping(self) -> bool:
        """No new claims: the worker is draining or closing."""
        return self._stopping

    @property
    def forced(self) -> bool:
        """A second stop request came: stop waiting for anything."""
        return self._forced

    def begin(self) -> None:
        self._stopping = True
        self._event.set()

    def force(self) -> None:
        self._stopping = self._forced = True
        self._forced_event.set()
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()

    async def sleep(self, seconds: float) -> None:
        """Sleep, or less if the worker stops meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)

    async def sleep_unless_forced(self, seconds: float) -> None:
        """Sleep, or less if the stop is forced meanwhile (for a loop that runs through the drain)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._forced_event.wait(), seconds)

    async def sleep_unless(self, event: asyncio.Event, seconds: float) -> None:
        """Sleep, or less if ``event`` is set or the worker stops meanwhile (``event`` is left set)."""
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.sleep(seconds))]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def unless_forced(self, awaitable: Awaitable[Any]) -> bool:
        """Await ``awaitable`` unless the stop is forced first; True if it finished."""
        return await self._unless(self._forced_event, awaitable)

    async def unless_stopping(self, awaitable: Awaitable[Any]) -> bool:
        """Await ``awaitable`` unless the worker stops first (a first request is enough: for waits
        that hold no job, such as the startup's wait for the database); True if it finished."""
        return await self._unless(self._event, awaitable)

    @staticmethod
    async def _unless(event: asyncio.Event, awaitable: Awaitable[Any]) -> bool:
        work = asyncio.ensure_future(awaitable)
        stopped = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if work.done():
            return True
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await work  # its cancellation has run (a pool connection handed back) before the caller goes on
        return False
