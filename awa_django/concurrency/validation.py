"""The capacity rules, in one place: worker startup, the admin form and the system
check all call these functions, so they can never disagree."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeGuard

from awa_django.concurrency.limits import QueueLimitsLike
from awa_django.exceptions import (
    ConfigurationError,
    InvalidRateLimitError,
    InvalidWeightError,
    InvalidWorkersError,
    MinWorkersExceedGlobalError,
)


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (``True`` is an int to Python, never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_positive_rate(value: object) -> bool:
    """A finite number of jobs per second above 0 (a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


def check_count(name: str, value: object) -> None:
    """Raise ValueError naming `name` unless `value` is an integer of at least 0.

    The argument check of every count the pool, the slots, the token bucket and the
    allocator take (permits wanted, released, held, a capacity).
    """
    if not (is_int(value) and value >= 0):
        raise ValueError(f"{name} must be an integer of at least 0, got {value!r}")


def check_global_max_workers(global_max_workers: object) -> ConfigurationError | None:
    """The error for an unusable global maximum, or None (None itself means hard-reserved mode)."""
    if global_max_workers is None or (is_int(global_max_workers) and global_max_workers >= 1):
        return None
    return ConfigurationError(
        f"global_max_workers {global_max_workers!r} is invalid; it must be an integer of at least 1, "
        "or unset for hard-reserved mode"
    )


def collect_queue_errors(queue: str, limits: QueueLimitsLike) -> list[ConfigurationError]:
    """Every problem with one queue's own settings (the rules that need no other queue)."""
    errors: list[ConfigurationError] = []
    if not (is_int(limits.max_workers) and limits.max_workers >= 1):
        errors.append(InvalidWorkersError(queue, "max_workers", limits.max_workers, 1))
    if not (is_int(limits.min_workers) and limits.min_workers >= 0):
        errors.append(InvalidWorkersError(queue, "min_workers", limits.min_workers, 0))
    if not (is_int(limits.weight) and limits.weight >= 1):
        errors.append(InvalidWeightError(queue, limits.weight))
    if limits.rate_limit is not None and not is_positive_rate(limits.rate_limit):
        errors.append(InvalidRateLimitError(queue, limits.rate_limit))
    if not (is_int(limits.rate_burst) and limits.rate_burst >= 0):
        errors.append(InvalidWorkersError(queue, "rate_burst", limits.rate_burst, 0))
    return errors


def collect_capacity_errors(
    global_max_workers: int | None, queues: Mapping[str, QueueLimitsLike]
) -> list[ConfigurationError]:
    """Every problem with a capacity configuration, in a stable order (empty when valid).

    Order: the global maximum, then each queue's own settings in mapping order, then
    `sum(min_workers) <= global_max_workers` (summing only the valid min_workers).
    """
    errors: list[ConfigurationError] = []
    global_error = check_global_max_workers(global_max_workers)
    if global_error is not None:
        errors.append(global_error)
    for queue, limits in queues.items():
        errors.extend(collect_queue_errors(queue, limits))
    if global_max_workers is not None and global_error is None:
        sum_min = sum(q.min_workers for q in queues.values() if is_int(q.min_workers) and q.min_workers >= 0)
        if sum_min > global_max_workers:
            errors.append(MinWorkersExceedGlobalError(sum_min, global_max_workers))
    return errors


def validate_capacity(global_max_workers: int | None, queues: Mapping[str, QueueLimitsLike]) -> None:
    """Raise the first of `collect_capacity_errors(...)`, if any.

    Rules: weight an integer >= 1; max_workers >= 1; min_workers >= 0; rate_limit None
    or a finite number > 0; rate_burst >= 0; and when global_max_workers is set (weighted
    mode) it is >= 1 and at least the sum of every queue's min_workers.
    """
    errors = collect_capacity_errors(global_max_workers, queues)
    if errors:
        raise errors[0]
