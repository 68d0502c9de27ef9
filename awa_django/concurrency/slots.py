"""A non-blocking counting semaphore: the local slots of one queue."""

from __future__ import annotations

from awa_django.concurrency.validation import check_count


class Slots:
    """`capacity` permits, handed out without ever blocking.

    Invariant: `in_use` only grows through `try_acquire`, which never takes it past
    `capacity`. After `resize` to a smaller capacity, permits already held stay held,
    so `in_use` may exceed `capacity` until they are released; nothing is granted
    meanwhile (`available` is `max(0, capacity - in_use)`).
    """

    __slots__ = ("_capacity", "_in_use")

    def __init__(self, capacity: int) -> None:
        check_count("capacity", capacity)
        self._capacity = capacity
        self._in_use = 0

    def __repr__(self) -> str:
        return f"Slots(capacity={self._capacity}, in_use={self._in_use})"

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def available(self) -> int:
        return max(0, self._capacity - self._in_use)

    def try_acquire(self, wanted: int) -> int:
        """Take up to `wanted` permits; return how many were granted (possibly 0)."""
        check_count("wanted", wanted)
        granted = min(wanted, self.available)
        self._in_use += granted
        return granted

    def release(self, n: int = 1) -> None:
        check_count("n", n)
        if n > self._in_use:
            raise ValueError(f"cannot release {n} permits: only {self._in_use} are in use")
        self._in_use -= n

    def resize(self, capacity: int) -> None:
        """Change the capacity; permits already held stay held."""
        check_count("capacity", capacity)
        self._capacity = capacity
