"""Demo job kinds, registered under the exact names ``noop``, ``sleep`` and ``fail``."""

from __future__ import annotations

import asyncio

from awa_django import job


@job("noop")
async def noop() -> None:
    """Does nothing: for throughput measurements and smoke tests."""


@job("sleep")
async def sleep(seconds: float = 1.0) -> None:
    """Sleeps for ``seconds``: a stand-in for I/O-bound work."""
    await asyncio.sleep(float(seconds))


class DemoFailureError(RuntimeError):
    pass


@job("fail", max_attempts=3)
async def fail(message: str = "the demo job failed on purpose") -> None:
    """Always raises, so its retries and final failure can be watched."""
    raise DemoFailureError(message)
