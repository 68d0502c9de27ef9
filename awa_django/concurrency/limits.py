"""The per-queue capacity settings the concurrency package reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from awa_django.defaults import MAX_WORKERS_DEFAULT, MIN_WORKERS_DEFAULT, RATE_BURST_DEFAULT, WEIGHT_DEFAULT


class QueueLimitsLike(Protocol):
    """Anything with a queue's capacity settings: `QueueLimits`, or a `Queue` model row."""

    @property
    def max_workers(self) -> int: ...

    @property
    def min_workers(self) -> int: ...

    @property
    def weight(self) -> int: ...

    @property
    def rate_limit(self) -> float | None: ...

    @property
    def rate_burst(self) -> int: ...


@dataclass(frozen=True)
class QueueLimits:
    """A queue's capacity settings, with the `Queue` model's defaults.

    `max_workers` applies in hard-reserved mode only; `min_workers` and `weight` apply
    in weighted mode only; the rate limit (jobs per second, None for none) applies in
    both. Values are not checked here: see `validate_capacity`.
    """

    max_workers: int = MAX_WORKERS_DEFAULT
    min_workers: int = MIN_WORKERS_DEFAULT
    weight: int = WEIGHT_DEFAULT
    rate_limit: float | None = None
    rate_burst: int = RATE_BURST_DEFAULT
