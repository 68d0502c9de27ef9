"""A token bucket for a queue's rate limit (jobs per second).

Time is passed in as a float (seconds from any monotonic clock); the bucket never
reads a clock. It starts full, refills at `max_rate` tokens per second up to `burst`,
and grants whole tokens only.
"""

from __future__ import annotations

import math

from awa_django.concurrency.validation import check_count, is_int, is_positive_rate
from awa_django.exceptions import InvalidRateLimitError, InvalidWorkersError

# Refill arithmetic is in floats; a token that is 1e-9 short of whole is counted as whole,
# so 0.1 s at 10/s always yields one token whatever the rounding of the clock values.
_EPSILON = 1e-9


class TokenBucket:
    """`max_rate` tokens per second, at most `burst` at once (0 means `ceil(max_rate)`)."""

    __slots__ = ("_burst", "_last", "_max_rate", "_queue", "_tokens")

    def __init__(self, max_rate: float, burst: int = 0, *, queue: str = "<unnamed>") -> None:
        self._queue = queue
        self._max_rate, self._burst = self._checked(max_rate, burst)
        self._tokens = float(self._burst)
        self._last: float | None = None  # set by the first call that passes the time

    def __repr__(self) -> str:
        return f"TokenBucket(max_rate={self._max_rate}, burst={self._burst}, tokens={self._tokens:.3f})"

    @property
    def max_rate(self) -> float:
        return self._max_rate

    @property
    def burst(self) -> int:
        return self._burst

    def available(self, now: float) -> int:
        """Whole tokens available at `now`, without taking any."""
        return math.floor(self._refilled(now) + _EPSILON)

    def take(self, wanted: int, now: float) -> int:
        """Refill up to `now`, then take up to `wanted` whole tokens; return how many."""
        check_count("wanted", wanted)
        self._advance(now)
        granted = min(wanted, math.floor(self._tokens + _EPSILON))
        self._tokens = max(0.0, self._tokens - granted)
        return granted

    def refund(self, n: int) -> None:
        """Give back `n` tokens taken for permits the database did not fill (capped at burst)."""
        check_count("n", n)
        self._tokens = min(float(self._burst), self._tokens + n)

    def seconds_until(self, n: int, now: float) -> float:
        """Seconds from `now` until `n` whole tokens are available (0.0 if they already are).

        Raises ValueError when `n` exceeds the burst: that many can never be available at once.
        """
        check_count("n", n)
        if n > self._burst:
            raise ValueError(f"{n} tokens can never be available at once: the burst is {self._burst}")
        missing = n - self._refilled(now)
        if missing <= _EPSILON:
            return 0.0
        at = max(now, self._last if self._last is not None else now) + missing / self._max_rate
        # With a large clock value the float sum can land a few ulps short of the refill;
        # step to the first instant at which `take(n, at)` really grants n.
        while self._refilled(at) + _EPSILON < n:
            at = math.nextafter(at, math.inf)
        return at - now

    def reconfigure(self, max_rate: float, burst: int = 0, *, now: float) -> None:
        """Change the rate and burst live: tokens earned so far are kept, capped at the new burst."""
        new_rate, new_burst = self._checked(max_rate, burst)
        if self._last is None:
            self._tokens = float(new_burst)  # never used: still full
        else:
            self._advance(now)
            self._tokens = min(self._tokens, float(new_burst))
        self._max_rate, self._burst = new_rate, new_burst

    def _checked(self, max_rate: float, burst: int) -> tuple[float, int]:
        if not is_positive_rate(max_rate):
            raise InvalidRateLimitError(self._queue, max_rate)
        if not (is_int(burst) and burst >= 0):
            raise InvalidWorkersError(self._queue, "rate_burst", burst, 0)
        return float(max_rate), burst or math.ceil(max_rate)

    def _refilled(self, now: float) -> float:
        if self._last is None or now <= self._last:
            return self._tokens
        return min(float(self._burst), self._tokens + (now - self._last) * self._max_rate)

    def _advance(self, now: float) -> None:
        self._tokens = self._refilled(now)
        # A clock that steps back earns nothing; the bucket keeps the latest time seen.
        if self._last is None or now > self._last:
            self._last = now
