"""One job's execution slot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

PermitKind = Literal["hard", "local", "overflow"]
"""Where a permit came from: a hard-reserved `max_workers` slot, a weighted queue's
`min_workers` slot, or the shared overflow pool."""


class Permit:
    """A slot reserved for one job, returned to where it came from exactly once.

    `release()` returns True the first time and False (with no effect) afterwards, so
    it is safe to call from a `finally` block and again from a shutdown path. The
    permit counts as released before the give-back callable runs, so even a give-back
    that raises is never retried.
    """

    __slots__ = ("_give_back", "_kind", "_lent", "_queue", "_released")

    def __init__(self, queue: str, kind: PermitKind, give_back: Callable[[], None]) -> None:
        self._queue = queue
        self._kind: PermitKind = kind
        self._give_back = give_back
        self._released = False
        self._lent = False

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Permit {self._kind} queue={self._queue!r} {state}>"

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def kind(self) -> PermitKind:
        return self._kind

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> bool:
        if self._released:
            return False
        self._released = True
        self._give_back()
        return True

    @property
    def lent(self) -> bool:
        """Its slot was lent (`Allocator.lending`): another queue's job may hold it already."""
        return self._lent

    def lend(self, give_back: Callable[[], None]) -> None:
        """Its slot was lent: what releasing it gives back from now on (`Allocator.lending`)."""
        self._give_back = give_back
        self._lent = True


def release_all(permits: Iterable[Permit]) -> int:
    """Release every permit not yet released; return how many this call released.

    Every permit is released even if a give-back raises; the first error is re-raised
    at the end, so a failing hook cannot leak the remaining slots.
    """
    released = 0
    error: BaseException | None = None
    for permit in permits:
        try:
            if permit.release():
                released += 1
        except Exception as exc:  # keep releasing the rest, then re-raise
            error = error or exc
    if error is not None:
        raise error
    return released
