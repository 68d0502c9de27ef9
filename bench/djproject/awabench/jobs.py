"""The bench handlers for awa_django, autodiscovered by the worker (``<app>/jobs.py``).

Every handler runs for any queue it is claimed from: the queue name in the handler log comes
from the job args (``q``), which the adapter sets.
"""

from __future__ import annotations

import asyncio

from awa_django import job
from bench import handlerlog


@job("noop", queue="bench")
async def noop(seq: int, q: str = "bench") -> None:
    handlerlog.start(seq, q)
    handlerlog.end(seq, q)


@job("sleep", queue="bench")
async def sleep(seq: int, ms: int, q: str = "bench") -> None:
    handlerlog.start(seq, q)
    await asyncio.sleep(ms / 1000)
    handlerlog.end(seq, q)
