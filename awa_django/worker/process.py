"""What the ``awa_worker`` process sets up for itself before its event loop starts.

The cyclic garbage collector was the largest single cost of a drain after the per-job code itself:
with Python's default gen-0 threshold (700 allocations) it ran several times per claimed batch and
scanned every object the start-up had made (Django, the registry, the handlers' modules).
``gc.freeze()`` moves those out of its reach for good, and a gen-0 threshold of 50,000 makes the
young collections rare; cycles are still collected, in larger and fewer passes (bench/README.md,
the levers table: 0.73 of the CPU per job). Only the worker's own process does this, never a
process that embeds a ``Worker`` (a test run, a Django server), and ``AWA["GC_FREEZE"] = False``
turns it off.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 50_000


def tune_gc(enabled: bool) -> bool:
    """Freeze what start-up made and raise the young generation's threshold; whether it did."""
    if not enabled or not gc.isenabled():
        return False
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
    return True
