"""Capacity decisions for the worker: pure, synchronous, no I/O, no clock reads.

State in, decision out: the dispatcher asks the `Allocator` for permits, trims them with
the queue's `TokenBucket`, and releases each `Permit` when its job is done. Nothing here
knows about SQL, Django or asyncio.
"""

from awa_django.concurrency.allocator import Allocator, Capacity, HardReserved, Mode, Weighted
from awa_django.concurrency.limits import QueueLimits, QueueLimitsLike
from awa_django.concurrency.permits import Permit, PermitKind, Permits, held_before, release_all
from awa_django.concurrency.pool import OverflowPool
from awa_django.concurrency.rate import TokenBucket
from awa_django.concurrency.slots import Slots
from awa_django.concurrency.validation import (
    check_global_max_workers,
    collect_capacity_errors,
    collect_queue_errors,
    validate_capacity,
)

__all__ = [
    "Allocator",
    "Capacity",
    "HardReserved",
    "Mode",
    "OverflowPool",
    "Permit",
    "PermitKind",
    "Permits",
    "QueueLimits",
    "QueueLimitsLike",
    "Slots",
    "TokenBucket",
    "Weighted",
    "check_global_max_workers",
    "collect_capacity_errors",
    "collect_queue_errors",
    "held_before",
    "release_all",
    "validate_capacity",
]
