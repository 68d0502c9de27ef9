"""One job's execution slot, and a run of them granted at once.

A dispatcher asks for as many permits as its queue could ever run here (up to the global
maximum) before it claims, and the claim fills as many as it finds jobs for. ``Permits`` holds
such a grant as a count: a ``Permit`` object is made only for a position someone reads (a job's),
and the positions nobody read go back with one give-back per kind however many they are. So a
claim costs what it claims, not what it may claim: with a global maximum of 100,000, one permit
object per slot made a claim of one job cost 1.3 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Literal, overload

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
    at the end, so a failing hook cannot leak the remaining slots. ``Permits`` go back in
    bulk: one give-back per kind for the positions never read.
    """
    if isinstance(permits, Permits):
        return permits.release()
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


def held_before(permits: Sequence[Permit]) -> Sequence[Permit]:
    """The permits of ``permits`` that existed before its grant: a `Permits`' head (the freed
    permits a hand-over claim keeps, say), every one of a plain sequence. Only these can be
    permits the caller already holds, and reading them makes no permit of the grant."""
    return permits.head if isinstance(permits, Permits) else permits


GiveBackMany = Callable[[Mapping[PermitKind, int]], None]
"""Gives back, at once, so many permits of each kind of one queue (`Allocator`)."""


class _Grant:
    """What `Permits` views: ``size`` permits of one queue, in runs of one kind each (local
    before overflow). Positions read are made into `Permit`s once (``made``); ``gone`` holds the
    disjoint, sorted ranges released in bulk, every position in them released."""

    __slots__ = ("give_back", "gone", "made", "many", "parts", "queue", "size")

    def __init__(
        self,
        queue: str,
        parts: Sequence[tuple[PermitKind, int]],
        one: Callable[[PermitKind], Callable[[], None]],
        many: GiveBackMany,
    ) -> None:
        self.queue = queue
        # One give-back per kind, shared by every permit of that kind: not a closure per permit read.
        self.give_back = {kind: one(kind) for kind, count in parts if count}
        self.many = many
        self.parts: list[tuple[PermitKind, int, int]] = []
        start = 0
        for kind, count in parts:
            if count:
                self.parts.append((kind, start, start + count))
                start += count
        self.size = start
        self.made: dict[int, Permit] = {}
        self.gone: list[tuple[int, int]] = []

    def kind(self, index: int) -> PermitKind:
        for kind, start, stop in self.parts:
            if start <= index < stop:
                return kind
        raise IndexError(index)  # pragma: no cover - callers check the bounds

    def is_gone(self, index: int) -> bool:
        return any(start <= index < stop for start, stop in self.gone)

    def permit(self, index: int) -> Permit:
        permit = self.made.get(index)
        if permit is None:
            kind = self.kind(index)
            permit = self.made[index] = Permit(self.queue, kind, self.give_back[kind])
            if self.is_gone(index):
                permit._released = True  # released in bulk before anyone read it
        return permit

    def release(self, start: int, stop: int) -> int:
        """Release positions ``start`` to ``stop``: the ones read one by one, the others in bulk."""
        released = 0
        error: BaseException | None = None
        unread: dict[PermitKind, int] = {}
        for kind, begin, end in self.parts:
            low, high = max(begin, start), min(end, stop)
            if low < high:
                unread[kind] = (
                    high - low - sum(min(high, b) - max(low, a) for a, b in self.gone if a < high and b > low)
                )
        for index, permit in list(self.made.items()):
            if not start <= index < stop:
                continue
            if not self.is_gone(index):
                unread[permit.kind] -= 1
            try:
                released += permit.release()
            except Exception as exc:  # keep releasing the rest, then re-raise
                error = error or exc
        self._forget(start, stop)
        counts = {kind: n for kind, n in unread.items() if n > 0}
        if counts:
            released += sum(counts.values())
            try:
                self.many(counts)  # counted as released first, like a Permit: never given back twice
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return released

    def _forget(self, start: int, stop: int) -> None:
        """Add ``[start, stop)`` to the released ranges, merging those it touches."""
        kept: list[tuple[int, int]] = []
        for a, b in self.gone:
            if b < start or a > stop:
                kept.append((a, b))
            else:
                start, stop = min(a, start), max(b, stop)
        kept.append((start, stop))
        kept.sort()
        self.gone = kept


class Permits(Sequence[Permit]):
    """A sequence of permits: some already made (``head``), then positions of a grant made into
    `Permit`s only when read. Slicing costs nothing per position; `release_all` (or `release`)
    gives the unread positions back in bulk. A grant's unread permits and its read ones are
    released exactly once either way, as `Permit`s are."""

    __slots__ = ("_grant", "_head", "_start", "_stop")

    def __init__(self, head: Sequence[Permit] = (), grant: _Grant | None = None, start: int = 0, stop: int = 0) -> None:
        self._head = list(head)
        self._grant = grant
        self._start = start
        self._stop = stop if grant is not None else start

    @classmethod
    def granted(
        cls,
        queue: str,
        parts: Sequence[tuple[PermitKind, int]],
        one: Callable[[PermitKind], Callable[[], None]],
        many: GiveBackMany,
    ) -> Permits:
        """A new grant of ``parts`` (kind, count) of ``queue``, in that order: ``one(kind)`` is what
        releasing one read permit gives back, ``many({kind: n})`` what releasing unread ones does."""
        grant = _Grant(queue, parts, one, many)
        return cls((), grant, 0, grant.size)

    def after(self, head: Sequence[Permit]) -> Permits:
        """``head`` followed by these permits, nothing made."""
        return Permits([*head, *self._head], self._grant, self._start, self._stop)

    @property
    def head(self) -> list[Permit]:
        """The permits made before the grant's (``after``), in order."""
        return self._head

    def __repr__(self) -> str:
        return f"<Permits {len(self)}: {len(self._head)} made, {self._stop - self._start} of a grant>"

    def __len__(self) -> int:
        return len(self._head) + self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Permit: ...

    @overload
    def __getitem__(self, index: slice) -> Permits: ...

    def __getitem__(self, index: int | slice) -> Permit | Permits:
        size = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(size)
            if step != 1:
                raise ValueError(f"Permits slices take no step, got {index.step!r}")
            stop = max(start, stop)
            made = len(self._head)
            begin = self._start + min(max(start - made, 0), self._stop - self._start)
            end = self._start + min(max(stop - made, 0), self._stop - self._start)
            return Permits(self._head[start:stop], self._grant, begin, end)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(f"permit index {index} out of range for {size} permits")
        if index < len(self._head):
            return self._head[index]
        assert self._grant is not None
        return self._grant.permit(self._start + index - len(self._head))

    def __iter__(self) -> Iterator[Permit]:
        yield from self._head
        if self._grant is not None:
            for index in range(self._start, self._stop):
                yield self._grant.permit(index)

    def release(self) -> int:
        """Release every permit not yet released, the unread ones in bulk; how many were released
        (every one is, even if a give-back raises; the first error is re-raised at the end)."""
        error: BaseException | None = None
        released = 0
        try:
            released += release_all(self._head)
        except Exception as exc:
            error = exc
        if self._grant is not None and self._stop > self._start:
            try:
                released += self._grant.release(self._start, self._stop)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return released
