"""The per-worker capacity plan the dispatchers ask for permits.

Two modes, fixed when the worker starts:

* hard-reserved (no global maximum): each queue has its own `Slots` of `max_workers`;
* weighted (global maximum set): each queue has local `Slots` of `min_workers`,
  guaranteed, plus a share of one `OverflowPool` of
  `global_max_workers - sum(min_workers)` permits, split by weight.
  `max_workers` is ignored in weighted mode.

In weighted mode the pool's fairness rule (`pool.py`) needs time; the allocator reads it from
the clock it is given (`clock=`, `time.monotonic` by default; tests pass their own), and only
from that clock.

Each queue's *demand* is what its last `try_acquire` asked for and did not get (it grows
back by one with each permit the queue releases while it still has demand); `waiting()`
names the queues with demand that a free permit would now be granted to, and `to_wake()` the
ones a release wakes: all of them in hard-reserved mode, in weighted mode only as many of the
most owed as permits are free (each takes at least one), so a release wakes only dispatchers
that can use it.

Invariants: a queue's `in_flight` is the number of its permits not yet released; in
hard mode it never grows past `max_workers`, in weighted mode the sum over all queues
never grows past `global_max_workers`. A `reconfigure` that shrinks a limit keeps the
permits already held, and nothing new is granted until the count is back under it.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Literal

from awa_django.concurrency.limits import QueueLimits, QueueLimitsLike
from awa_django.concurrency.permits import Permit, PermitKind, Permits
from awa_django.concurrency.pool import OverflowPool
from awa_django.concurrency.slots import Slots
from awa_django.concurrency.validation import check_count, validate_capacity
from awa_django.exceptions import ConfigurationError

Mode = Literal["hard_reserved", "weighted"]
"""The values of `models.ConcurrencyMode`."""


@dataclass(frozen=True)
class HardReserved:
    """A queue's capacity in hard-reserved mode."""

    max_workers: int


@dataclass(frozen=True)
class Weighted:
    """A queue's capacity in weighted mode; `overflow_held` is its current take of the pool."""

    min_workers: int
    weight: int
    overflow_held: int


Capacity = HardReserved | Weighted


def _frozen(limits: QueueLimitsLike) -> QueueLimits:
    """A copy, so a model row edited after validation cannot change what is reported."""
    return QueueLimits(
        max_workers=limits.max_workers,
        min_workers=limits.min_workers,
        weight=limits.weight,
        rate_limit=limits.rate_limit,
        rate_burst=limits.rate_burst,
    )


class _QueueState:
    """One queue's local slots. Kept after the queue is removed, so that its outstanding
    permits still have somewhere to go back to and a re-added queue counts them."""

    __slots__ = ("active", "demand", "limits", "rank", "slots")

    def __init__(self, limits: QueueLimitsLike, capacity: int, rank: int) -> None:
        self.limits = _frozen(limits)
        self.slots = Slots(capacity)
        self.active = True
        self.demand = 0  # what the last try_acquire asked for and did not get
        self.rank = rank  # its place in the configuration, for the order `waiting()` names queues in


class Allocator:
    """Hands out `Permit`s per queue without ever blocking.

    Build it with `Allocator(global_max_workers, queues)` (the mode follows from
    whether `global_max_workers` is None), or `Allocator.hard_reserved(...)` /
    `Allocator.weighted(...)`. The configuration is validated with `validate_capacity`.
    Set `on_release` to be told (with the queue name) each time permits come back (once
    for a bulk release of `Permits`), e.g. to wake dispatchers waiting for capacity.
    """

    def __init__(
        self,
        global_max_workers: int | None,
        queues: Mapping[str, QueueLimitsLike],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        validate_capacity(global_max_workers, queues)
        self._clock = clock
        self._caps: dict[str, int] | None = None  # scope "cluster": capacities the leader set
        self._total_in_flight = 0
        self._global_max_workers = global_max_workers
        self._queues: dict[str, _QueueState] = {}
        # The queues with demand, so `waiting()` looks at those, not at every configured queue.
        self._demanding: dict[str, _QueueState] = {}
        self._ranked = 0
        # Per queue, lent permits not yet released (`lending`): their jobs' rows are being written.
        self._lent: Counter[str] = Counter()
        self._pool: OverflowPool | None = None
        self.on_release: Callable[[str], None] | None = None
        if global_max_workers is None:
            for name, limits in queues.items():
                self._queues[name] = _QueueState(limits, limits.max_workers, self._next_rank())
        else:
            for name, limits in queues.items():
                self._queues[name] = _QueueState(limits, limits.min_workers, self._next_rank())
            self._pool = OverflowPool(*self._pool_config(global_max_workers, queues), now=clock())

    @classmethod
    def hard_reserved(cls, max_workers: Mapping[str, int], *, clock: Callable[[], float] = time.monotonic) -> Allocator:
        """Hard-reserved mode from `{queue: max_workers}`."""
        return cls(None, {name: QueueLimits(max_workers=n) for name, n in max_workers.items()}, clock=clock)

    @classmethod
    def weighted(
        cls,
        global_max_workers: int,
        queues: Mapping[str, QueueLimitsLike],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> Allocator:
        """Weighted mode; each queue's `min_workers` and `weight` are used, `max_workers` is ignored."""
        return cls(global_max_workers, queues, clock=clock)

    # --- reading -----------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return "hard_reserved" if self._pool is None else "weighted"

    @property
    def global_max_workers(self) -> int | None:
        return self._global_max_workers

    @property
    def queues(self) -> tuple[str, ...]:
        """The configured queues (not those removed by `reconfigure`)."""
        return tuple(name for name, state in self._queues.items() if state.active)

    def serves(self, queue: str) -> bool:
        """Whether the queue is configured (not removed by `reconfigure`)."""
        state = self._queues.get(queue)
        return state is not None and state.active

    @property
    def total_in_flight(self) -> int:
        """Permits not yet released, over every queue (removed ones included); kept as a count,
        so asking costs nothing however many queues there are."""
        return self._total_in_flight

    def capacity(self, queue: str) -> Capacity:
        state = self._active(queue)
        if self._pool is None:
            if self._caps is not None:
                return HardReserved(max_workers=self._caps.get(queue, 0))
            return HardReserved(max_workers=state.limits.max_workers)
        return Weighted(
            min_workers=state.limits.min_workers,
            weight=state.limits.weight,
            overflow_held=self._overflow_held(queue),
        )

    def in_flight(self, queue: str) -> int:
        """The queue's permits not yet released; a queue removed by `reconfigure` is
        known here until its last permit is released."""
        if queue not in self._queues:
            raise self._unknown(queue)
        return self._in_flight(self._queues[queue], queue)

    def available(self, queue: str) -> int:
        """How many permits `try_acquire(queue, n)` would grant now for a large `n` (0 once removed)."""
        if queue not in self._queues:
            raise self._unknown(queue)
        state = self._queues[queue]
        if not state.active:
            return 0
        if self._pool is None:
            return state.slots.available
        return min(self._headroom(), state.slots.available + self._pool.grantable(queue, now=self._clock()))

    def share(self, queue: str) -> float:
        """Weighted mode: the queue's fractional share of the overflow pool now (0 when it does
        not contend); hard mode: its `max_workers`."""
        state = self._active(queue)
        if self._pool is None:
            return float(state.limits.max_workers)
        return self._pool.share(queue)

    def demand(self, queue: str) -> int:
        """What the queue's last `try_acquire` asked for and did not get (0 once cleared)."""
        return self._active(queue).demand

    def waiting(self) -> list[str]:
        """The queues with demand that a permit free now would be granted to (most owed first in
        the overflow pool): the dispatchers to wake when capacity comes back."""
        if self._pool is None:
            return self._waiting_locally()
        if self._headroom() == 0:
            return []
        local = self._waiting_locally()
        return list(dict.fromkeys([*local, *self._pool.waiting(now=self._clock())]))

    def to_wake(self, *, skip: str | None = None) -> list[str]:
        """The dispatchers to wake now that permits may be free: in hard-reserved mode every one
        `waiting()` names (each queue's slots are its own); in weighted mode only its first, most
        owed first, as many as permits are free, since each of them takes at least one. Waking
        all of them woke, with 1,000 one-job queues contending for 50 slots, up to 50 dispatchers
        per freed permit, every one but the first to be refused. ``skip``: a queue just refused
        (the ranking moved between its wake and its poll), so the next ones are woken instead."""
        waiting = self.waiting()
        if self._pool is None:
            return waiting
        if skip is not None:
            waiting = [queue for queue in waiting if queue != skip]
        return waiting[: self._headroom()]

    @property
    def free(self) -> int:
        """Weighted mode: how many more permits the global maximum allows now (hard-reserved: 0,
        as no permit is shared)."""
        return 0 if self._pool is None else self._headroom()

    def snapshot(self) -> dict[str, dict[str, int | str]]:
        """`{queue: {mode, capacity fields, in_flight, available}}` for the configured queues, JSON-ready."""
        return {
            name: {
                "mode": self.mode,
                **asdict(self.capacity(name)),
                "in_flight": self.in_flight(name),
                "available": self.available(name),
            }
            for name in self.queues
        }

    # --- changing ----------------------------------------------------------------

    def try_acquire(self, queue: str, wanted: int) -> list[Permit]:
        """Up to `wanted` permits for `queue`, possibly none; never blocks.

        Weighted mode takes local slots first and asks the overflow pool for the rest,
        recording that as the queue's demand. The list holds local permits before
        overflow ones, so a caller dropping its surplus from the end (`permits[n:]`)
        gives shared capacity back first. `reserve` grants the same without making a
        `Permit` per slot.
        """
        return list(self.reserve(queue, wanted))

    def reserve(self, queue: str, wanted: int) -> Permits:
        """What `try_acquire` grants, as `Permits`: a `Permit` is made only for a position read
        (a job's), and `release_all` gives the unread ones back with one call per kind. The cost
        is one decision plus the permits read, whatever `wanted` and the maxima are; a dispatcher
        asks for up to the global maximum before each claim."""
        state = self._active(queue)
        check_count("wanted", wanted)
        if self._pool is None:
            granted = state.slots.try_acquire(wanted)
            self._set_demand(queue, state, wanted - granted)
            return self._permits(queue, [("hard", granted)])
        now = self._clock()
        headroom = self._headroom()
        local = state.slots.try_acquire(min(wanted, headroom))
        headroom -= local
        # The whole rest is recorded as demand even when the headroom is spent: the queue contends.
        # The pool grants no more than the headroom: it can see free slots the global maximum
        # still counts (after a reconfigure, and while the writer lends the slots of jobs being
        # written). Granting and then giving back the excess left the pool's demand at 0 where the
        # allocator's was not, so no release ever named the queue again (a lost wake-up).
        overflow = self._pool.try_acquire(queue, wanted - local, now=now, limit=headroom)
        self._set_demand(queue, state, wanted - local - overflow)
        return self._permits(queue, [("local", local), ("overflow", overflow)])

    def keepable(self, queue: str, permits: Sequence[Permit]) -> list[Permit]:
        """Of ``permits`` (the queue's, all about to come back), those that may pass straight to the
        queue's next jobs instead of being released and acquired again.

        As many are kept as ``try_acquire`` could grant right after all of them were released, so
        handing them over never takes more than the rules give the queue now: hard and local
        slots up to capacity (a shrinking reconfigure keeps fewer), overflow permits up to the
        queue's target in the pool (so not while a contender below its share waits for one), and
        never above the global maximum. Local permits are kept first.
        Changes nothing.
        """
        state = self._queues.get(queue)
        held = [p for p in permits if not p.released and not p.lent and p.queue == queue]
        if state is None or not state.active or not held:
            return []
        local = [p for p in held if p.kind != "overflow"]
        overflow = [p for p in held if p.kind == "overflow"]
        keep_local = max(0, min(len(local), state.slots.capacity - (state.slots.in_use - len(local))))
        if self._pool is None:
            return local[:keep_local]
        assert self._global_max_workers is not None
        headroom = self._global_max_workers - (self.total_in_flight - len(held))
        keep_local = max(0, min(keep_local, headroom))
        keep_overflow = max(0, min(self._pool.keepable(queue, len(overflow), now=self._clock()), headroom - keep_local))
        return local[:keep_local] + overflow[:keep_overflow]

    @contextmanager
    def lending(self, permits: Sequence[Permit]) -> Iterator[None]:
        """Weighted mode: lend the slots of ``permits`` (held by jobs whose final states are being
        written) to the grants made inside the block, so the writer can pass them straight to
        other queues' next jobs, claimed in the same round trip as the writes.

        On entry each permit's slot goes back where it came from (the pool, or its queue's own
        slots), and grants inside the block may take it; its count against the global maximum is
        taken by those grants first, and any count no grant took stays held. Until the permit is
        released (after the write that ends its job), its queue still counts it in ``in_flight``,
        since the job's row is still running: so a queue never runs more rows than it counts, and
        the host never more than the global maximum (``total_in_flight`` counts each slot once:
        for that round trip the queues' ``in_flight`` may add up to more). Nothing else can be
        granted in between: the block runs on the loop's thread with no await. Hard-reserved mode
        shares no slot across queues: it lends nothing."""
        lent = [] if self._pool is None else [p for p in permits if type(p) is Permit and self._lendable(p)]
        for permit in lent:
            self._free_origin(permit.queue, permit.kind)
            self._lent[permit.queue] += 1
        self._total_in_flight -= len(lent)
        before = self._total_in_flight
        try:
            yield
        finally:
            used = min(len(lent), max(0, self._total_in_flight - before))
            for index, permit in enumerate(lent):
                permit.lend(functools.partial(self._lent_back, permit.queue, index >= used))
            self._total_in_flight += len(lent) - used

    def _lent_back(self, queue: str, counted: bool) -> None:
        """A lent permit is released (its job's row written): its queue stops counting it, and a
        count no grant took goes back like any release."""
        self._lent[queue] -= 1
        if not self._lent[queue]:
            del self._lent[queue]
        if counted:
            self._released(queue)
        else:
            self._forget_if_removed(queue)

    def _lendable(self, permit: Permit) -> bool:
        state = self._queues.get(permit.queue)
        return not permit.released and not permit.lent and state is not None and permit.kind in ("local", "overflow")

    def set_capacities(self, caps: Mapping[str, int]) -> None:
        """Hard-reserved mode in scope "cluster": each queue's capacity is what the cluster's
        leader gave this worker (0 for a queue it did not name), instead of its `max_workers`.
        Permits already held stay held; nothing new is granted while a queue is over its cap."""
        if self._pool is not None:
            raise ConfigurationError("capacities come from the cluster only in hard-reserved mode")
        self._caps = {name: max(0, int(n)) for name, n in caps.items()}
        for name, state in self._queues.items():
            if state.active:
                state.slots.resize(self._caps.get(name, 0))

    @property
    def capacities(self) -> dict[str, int] | None:
        """The capacities set with `set_capacities` (None: each queue's own `max_workers`)."""
        return None if self._caps is None else dict(self._caps)

    def clear_demand(self, queue: str) -> None:
        """The queue found nothing to claim: stop counting it as a contender for the pool."""
        state = self._active(queue)
        self._set_demand(queue, state, 0)
        if self._pool is not None:
            self._pool.try_acquire(queue, 0, now=self._clock())

    def reconfigure(self, global_max_workers: int | None, queues: Mapping[str, QueueLimitsLike]) -> None:
        """Apply new limits live; queues may be added or removed.

        Validated first: on invalid input this raises and the old configuration stays.
        The mode cannot change while running (ConfigurationError). Permits already held
        stay held and are released normally, also those of a removed queue.
        """
        validate_capacity(global_max_workers, queues)
        if (global_max_workers is None) != (self._pool is None):
            wanted_mode = "hard-reserved" if global_max_workers is None else "weighted"
            raise ConfigurationError(
                f"cannot switch to {wanted_mode} mode while the worker runs "
                "(global_max_workers set or unset); restart the worker"
            )
        for name, state in self._queues.items():
            state.active = name in queues
            if not state.active:  # a removed queue contends no more (the pool forgets it too)
                self._set_demand(name, state, 0)
        for name, limits in queues.items():
            capacity = limits.max_workers if global_max_workers is None else limits.min_workers
            if self._caps is not None:
                capacity = self._caps.get(name, 0)
            existing = self._queues.get(name)
            if existing is None:
                self._queues[name] = _QueueState(limits, capacity, self._next_rank())
            else:  # a re-added queue keeps its state, so its outstanding permits still count
                existing.limits = _frozen(limits)
                existing.slots.resize(capacity)
        self._global_max_workers = global_max_workers
        if self._pool is not None and global_max_workers is not None:
            self._pool.reconfigure(*self._pool_config(global_max_workers, queues), now=self._clock())
        # Drop removed queues once nothing of theirs is outstanding.
        for name in [n for n, s in self._queues.items() if not s.active and self._in_flight(s, n) == 0]:
            del self._queues[name]
            self._demanding.pop(name, None)

    # --- helpers -----------------------------------------------------------------

    @staticmethod
    def _pool_config(global_max_workers: int, queues: Mapping[str, QueueLimitsLike]) -> tuple[int, dict[str, int]]:
        total = global_max_workers - sum(limits.min_workers for limits in queues.values())
        return total, {name: limits.weight for name, limits in queues.items()}

    def _set_demand(self, queue: str, state: _QueueState, demand: int) -> None:
        state.demand = demand
        if demand > 0:
            self._demanding[queue] = state
        else:
            self._demanding.pop(queue, None)

    def _waiting_locally(self) -> list[str]:
        """Queues with demand and a free slot of their own, in configuration order."""
        if self._pool is not None and self._global_max_workers == self._pool.total:
            return []  # no queue has a floor: no local slot to wait for
        ready = [(s.rank, n) for n, s in self._demanding.items() if s.active and s.slots.available > 0]
        return [n for _, n in sorted(ready)]

    def _next_rank(self) -> int:
        self._ranked += 1
        return self._ranked

    def _headroom(self) -> int:
        """Weighted mode: how far the total in flight is below the global maximum."""
        assert self._global_max_workers is not None
        return max(0, self._global_max_workers - self.total_in_flight)

    def _in_flight(self, state: _QueueState, queue: str) -> int:
        return state.slots.in_use + self._overflow_held(queue) + self._lent.get(queue, 0)

    def _overflow_held(self, queue: str) -> int:
        if self._pool is None:
            return 0
        try:
            return self._pool.held(queue)
        except KeyError:  # removed from the pool, and holds nothing there
            return 0

    def _permits(self, queue: str, parts: list[tuple[PermitKind, int]]) -> Permits:
        def one(kind: PermitKind) -> Callable[[], None]:
            def give_back() -> None:
                self._free_origin(queue, kind)
                self._released(queue)

            return give_back

        def many(counts: Mapping[PermitKind, int]) -> None:
            for kind, n in counts.items():
                self._free_origin(queue, kind, n)
            self._released(queue, sum(counts.values()))

        self._total_in_flight += sum(n for _, n in parts)
        return Permits.granted(queue, parts, one, many)

    def _free_origin(self, queue: str, kind: PermitKind, n: int = 1) -> None:
        """``n`` permits' slots go back where they came from: the pool, or the queue's own slots."""
        state = self._queues[queue]
        if kind == "overflow":
            assert self._pool is not None
            self._pool.release(queue, n, now=self._clock())
        else:
            state.slots.release(n)
        if state.demand > 0:  # it could use the freed slots again
            state.demand += n

    def _released(self, queue: str, n: int = 1) -> None:
        """``n`` permits of ``queue`` came back: one `on_release` call, however many."""
        self._total_in_flight -= n
        self._forget_if_removed(queue)
        if self.on_release is not None:
            self.on_release(queue)

    def _forget_if_removed(self, queue: str) -> None:
        state = self._queues.get(queue)
        if state is not None and not state.active and self._in_flight(state, queue) == 0:
            del self._queues[queue]  # a removed queue's last permit is back: forget it
            self._demanding.pop(queue, None)

    def _active(self, queue: str) -> _QueueState:
        state = self._queues.get(queue)
        if state is None or not state.active:
            raise self._unknown(queue)
        return state

    def _unknown(self, queue: str) -> KeyError:
        known = ", ".join(repr(q) for q in self.queues) or "none"
        return KeyError(f"queue {queue!r} is not configured in this worker (its queues: {known})")
