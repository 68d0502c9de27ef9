"""What the ``awa_worker`` process sets up for itself before its event loop starts.

The cyclic garbage collector was the largest single cost of a drain after the per-job code itself:
with Python's default gen-0 threshold (700 allocations) it ran several times per claimed batch and
scanned every object the start-up had made (Django, the registry, the handlers' modules).
``gc.freeze()`` moves those out of its reach for good (a full collection no longer walks them: the
long pauses a pickup's p99 sees), and a gen-0 threshold of 10,000 makes the young collections 14
times rarer; cycles are still collected, in fewer passes (bench/README.md, the levers table).
Not higher: a young collection walks every container that survived since the last one, 0.07 ms
for 10,000 on this machine but 0.7 ms for 50,000, a pause a pickup would wait behind.

Only the worker's own process does this, never a process that embeds a ``Worker`` (a test run, a
Django server), and ``AWA["GC_FREEZE"] = False`` turns it off.

The event loop is uvloop's where it is installed (``AWA["EVENT_LOOP"]``, ``--event-loop``): the
worker's Python per job is mostly the loop turning and psycopg's waits registering with it, and
uvloop does both in C (bench/README.md, "uvloop": about 10 % less CPU per job on a drain).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
from collections.abc import Callable

from awa_django.exceptions import ConfigurationError

GEN0_THRESHOLD = 10_000


def tune_gc(enabled: bool) -> bool:
    """Freeze what start-up made and raise the young generation's threshold; whether it did."""
    if not enabled or not gc.isenabled():
        return False
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
    return True


def loop_factory(choice: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """(the factory ``asyncio.Runner`` takes, None for asyncio's own loop; the loop's name for the
    log) for an ``EVENT_LOOP`` choice: ``auto`` takes uvloop where it imports, ``uvloop`` requires
    it, ``asyncio`` keeps the standard loop."""
    if choice == "asyncio":
        return None, "asyncio"
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "auto":
            return None, "asyncio"
        raise ConfigurationError(
            f"the event loop 'uvloop' was asked for but it cannot be imported ({exc}): pip install "
            "'awa-django[uvloop]' (not on Windows), or use --event-loop auto or asyncio"
        ) from exc
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory, f"uvloop {getattr(uvloop, '__version__', '')}".strip()
