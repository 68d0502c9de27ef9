"""The overflow pool's rule computed plainly, as it was before the pool kept its state
incrementally: every decision re-plans the water-fill over every contender, settles every
credit, and ranks every fractional contender. Slow (O(c log c) per decision) and obviously
the rule, so the incremental pool is checked against it (`test_pool_oracle.py`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cmp_to_key

from awa_django.concurrency.validation import check_count, is_int
from awa_django.concurrency.waterfill import water_fill
from awa_django.exceptions import InvalidWeightError

# A queue that stays away forgets its debt by half every DEBT_HALF_LIFE seconds: enough to stop a
# queue that contends in bursts from overtaking its share, without making a rate-limited queue that
# comes back once a second pay for a slot it held long ago.
DEBT_HALF_LIFE = 1.0
_RERANK_AFTER = 0.001  # seconds: how long a ranking of the contenders is reused when nothing changed
# Credits per unit of weight closer than this (slot-seconds) rank as equal. Queues with equal
# histories (each held as long and earned as long) end with credits that differ only in the float
# rounding of their sums and of the clock values; that rounding must not decide who is served
# before the documented tie-breaks do. Far below the drift `_RERANK_AFTER` already accepts.
_CREDIT_TIE = 1e-6

_RankKey = tuple[float, float, float, str]


def _rank_order(a: _RankKey, b: _RankKey) -> int:
    """Compare two `_rank_key`s: most owed first, owed amounts within `_CREDIT_TIE` tied."""
    if abs(a[0] - b[0]) > _CREDIT_TIE:
        return -1 if a[0] < b[0] else 1
    return (a[1:] > b[1:]) - (a[1:] < b[1:])


_RANK = cmp_to_key(_rank_order)


def _checked_weights(weights: Mapping[str, int]) -> dict[str, int]:
    for queue, weight in weights.items():
        if not (is_int(weight) and weight >= 1):
            raise InvalidWeightError(queue, weight)
    return dict(weights)


@dataclass(slots=True)
class _Entry:
    """One queue's standing in the pool."""

    weight: int  # 0 once removed by `reconfigure` (it keeps its held permits until released)
    held: int = 0
    demand: int = 0
    credit: float = 0.0  # slot-seconds below (+) or above (-) its share, up to `stamp`
    stamp: float = 0.0
    last_grant: float = float("-inf")
    share: float = 0.0  # fractional share, valid while the pool's plan is clean
    floor: int = 0  # integer part of the share (the cap when capped)
    fractional: bool = False  # the share is not a whole number (exactly, not as a float)
    debt: float = 0.0  # per unit of weight, below the others' average, kept while it does not contend
    capped: bool = False

    @property
    def contending(self) -> bool:
        return self.held > 0 or (self.demand > 0 and self.weight > 0)


class ReferencePool:
    """`total` permits shared by weighted queues; the rule of `awa_django.concurrency.pool`.

    Every method that changes something or depends on the ledger takes `now` (seconds on
    any monotonic clock); without it the pool uses the latest time it was given, so a
    caller that never passes time gets the same targets without rotation over time.
    """

    __slots__ = ("_cache", "_contenders", "_entries", "_held_total", "_now", "_remainder", "_total", "_version")

    def __init__(self, total: int, weights: Mapping[str, int], *, now: float | None = None) -> None:
        check_count("total", total)
        self._total = total
        self._entries: dict[str, _Entry] = {q: _Entry(w) for q, w in _checked_weights(weights).items()}
        self._contenders: dict[str, _Entry] = {}
        self._held_total = 0
        self._now = 0.0 if now is None else now
        self._remainder = 0
        self._version = 0
        self._cache: tuple[int, float, dict[str, int]] | None = None

    def __repr__(self) -> str:
        held = {q: e.held for q, e in self._entries.items()}
        demand = {q: e.demand for q, e in self._entries.items() if e.weight}
        return f"ReferencePool(total={self._total}, held={held!r}, demand={demand!r})"

    # --- reading -----------------------------------------------------------------

    @property
    def total(self) -> int:
        return self._total

    @property
    def held_total(self) -> int:
        return self._held_total

    @property
    def available(self) -> int:
        return max(0, self._total - self._held_total)

    @property
    def weights(self) -> dict[str, int]:
        return {q: e.weight for q, e in self._entries.items() if e.weight}

    @property
    def contenders(self) -> frozenset[str]:
        """Queues that hold permits or have demand (removed queues only while they hold)."""
        return frozenset(self._contenders)

    def held(self, queue: str) -> int:
        return self._entry(queue, removed_ok=True).held

    def demand(self, queue: str) -> int:
        return self._known(queue).demand

    def share(self, queue: str) -> float:
        """The queue's fractional share now (0 while it does not contend)."""
        self._known(queue)
        entry = self._contenders.get(queue)
        return 0.0 if entry is None else entry.share

    def credit(self, queue: str, *, now: float | None = None) -> float:
        """Slot-seconds the queue is owed (+) or has had beyond its share (-) while contending."""
        entry = self._known(queue)
        now = self._advance(now)
        return self._credit(entry, now) if queue in self._contenders else 0.0

    def target(self, queue: str, *, now: float | None = None) -> int:
        """How many overflow permits the queue may hold now (0 while it does not contend)."""
        self._known(queue)
        now = self._advance(now)
        return self._target(queue, now)

    def fair_share(self, queue: str, *, now: float | None = None) -> int:
        """The integer share the queue would have if it contended now with a large demand."""
        entry = self._known(queue)
        now = self._advance(now)
        saved, large = entry.demand, max(self._total, 1)
        if saved >= large:
            return self._target(queue, now)
        self._set_demand(entry, queue, large, now)
        try:
            return self._target(queue, now)
        finally:
            self._set_demand(entry, queue, saved, now)

    def grantable(self, queue: str, *, now: float | None = None) -> int:
        """What `try_acquire(queue, n)` would grant now for a large `n`, changing nothing."""
        entry = self._known(queue)
        if self.available == 0:
            return 0  # nothing is free: no need to rank anyone
        return max(0, min(self.available, self.fair_share(queue, now=now) - entry.held))

    def waiting(self, *, now: float | None = None) -> list[str]:
        """Queues with demand that are below their target while permits are free: the ones to
        wake when capacity comes back, most owed first."""
        now = self._advance(now)
        if self.available == 0:
            return []
        targets = self._targets(now)
        below = [
            (e, q) for q, e in self._contenders.items() if e.demand > 0 and e.weight > 0 and e.held < targets.get(q, 0)
        ]
        below.sort(key=lambda pair: _RANK(self._rank_key(pair[1], pair[0], now)))
        return [q for _, q in below]

    def keepable(self, queue: str, returning: int, *, now: float | None = None) -> int:
        """Of `returning` permits the queue is about to give back, how many it may keep for its
        next jobs: as many as `try_acquire` would grant right after they came back."""
        entry = self._known(queue)
        check_count("returning", returning)
        if returning > entry.held:
            raise ValueError(f"queue {queue!r} cannot return {returning} overflow permits: it holds {entry.held}")
        now = self._advance(now)
        free = self._total - (self._held_total - returning)
        if entry.demand == 0 or free <= 0:
            return 0
        target = self._target(queue, now)
        return max(0, min(returning, free, target - (entry.held - returning)))

    # --- changing ----------------------------------------------------------------

    def try_acquire(self, queue: str, wanted: int, *, now: float | None = None) -> int:
        """Record `wanted` as the queue's demand and grant what the rule allows; never blocks.

        `try_acquire(queue, 0)` clears the demand: a queue holding nothing then stops
        contending (and forgets its credit).
        """
        entry = self._known(queue)
        check_count("wanted", wanted)
        now = self._advance(now)
        self._set_demand(entry, queue, wanted, now)
        if wanted == 0 or self._held_total >= self._total:
            return 0  # nothing is free: no need to rank anyone
        granted = max(0, min(wanted, self.available, self._target(queue, now) - entry.held))
        if granted:
            # held + demand (the cap) is unchanged, and with it every share.
            self._settle(entry, now)
            entry.held += granted
            entry.demand = wanted - granted
            entry.last_grant = now
            self._held_total += granted
            # The ranking stands: a grant goes to a queue within its target, and leaves every
            # target as it was (shares and the remainder unchanged); see the pool's `try_acquire`.
        return granted

    def release(self, queue: str, n: int = 1, *, now: float | None = None) -> None:
        """Give `n` permits back. A queue that still has demand could use the freed slots, so
        its cap (and every share) stays as it was; one without demand shrinks to what it holds."""
        entry = self._entry(queue, removed_ok=True)
        check_count("n", n)
        if n > entry.held:
            raise ValueError(f"queue {queue!r} cannot release {n} overflow permits: it holds {entry.held}")
        if n == 0:
            return
        now = self._advance(now)
        self._settle(entry, now)
        entry.held -= n
        self._held_total -= n
        self._version += 1
        if entry.demand > 0 and entry.weight > 0:
            entry.demand += n
            return
        self._settle_all(now)
        self._update_membership(queue, entry)
        self._plan()

    def observe(self, uses: Mapping[str, tuple[int, int]], *, now: float | None = None) -> None:
        """Set each named queue's held count and demand at once, as measured elsewhere: the
        cluster leader feeds the pool each round with what every queue holds and wants across
        all workers, and reads the targets back. Credits are settled first, so the ledger
        accounts each round's holding to the shares in force during it."""
        for queue, (held, demand) in uses.items():
            self._known(queue)
            check_count("held", held)
            check_count("demand", demand)
        now = self._advance(now)
        self._settle_all(now)
        for queue, (held, demand) in uses.items():
            entry = self._entries[queue]
            if held > entry.held:
                entry.last_grant = now
            self._held_total += held - entry.held
            entry.held, entry.demand = held, demand
            self._update_membership(queue, entry)
        self._plan()

    def reconfigure(self, total: int, weights: Mapping[str, int], *, now: float | None = None) -> None:
        """Change the total and the weights live; validated before anything changes.

        Permits already held stay held and are released normally; a queue removed from
        `weights` keeps its held count (it still uses up the pool) until it releases it.
        """
        check_count("total", total)
        new_weights = _checked_weights(weights)
        now = self._advance(now)
        self._settle_all(now)
        self._total = total
        for queue, entry in list(self._entries.items()):
            if queue not in new_weights:
                entry.weight = 0
                entry.demand = 0
                self._update_membership(queue, entry)
        for queue, weight in new_weights.items():
            entry = self._entries.setdefault(queue, _Entry(weight, stamp=now))
            entry.weight = weight
        self._plan()

    # --- the rule ------------------------------------------------------------------

    def _set_demand(self, entry: _Entry, queue: str, demand: int, now: float) -> None:
        if entry.demand != demand:
            self._settle_all(now)
            stays = queue in self._contenders and not entry.capped
            before = self._plan_state()
            entry.demand = demand
            self._update_membership(queue, entry)
            version = self._version
            self._plan()
            if stays and queue in self._contenders and not entry.capped and self._plan_state() == before:
                self._version = version  # an uncapped contender's demand moved, no share did: the ranking stands

    def _plan_state(self) -> tuple[int, list[tuple[str, float, int, bool, bool]]]:
        """What the targets and the ranking are computed from, besides credits and tie-breaks."""
        return self._remainder, [(q, e.share, e.floor, e.fractional, e.capped) for q, e in self._contenders.items()]

    def _update_membership(self, queue: str, entry: _Entry) -> None:
        """Keep `_contenders` in step with `entry.contending`.

        A queue that joins starts level, per unit of weight, with the average contender, less
        any debt it left with: a queue that stops contending (it ran dry, or out of rate tokens)
        loses what it was owed ("use it or lose it"), but what it took beyond its share is still
        owed when it comes back (halving every DEBT_HALF_LIFE seconds away), so a queue that
        contends in bursts cannot take more than its share by leaving between them.
        """
        if entry.contending:
            if queue not in self._contenders:
                away = max(0.0, self._now - entry.stamp)  # stamp: when it left
                debt = entry.debt * 0.5 ** (away / DEBT_HALF_LIFE)
                entry.credit = (self._level() + debt) * entry.weight
                entry.debt = 0.0
                entry.stamp = self._now
                self._contenders[queue] = entry
        elif self._contenders.pop(queue, None) is not None:
            if entry.weight > 0:
                entry.debt = min(0.0, entry.credit / entry.weight - self._level())
            entry.credit = 0.0
            entry.stamp = self._now
        if not entry.contending and entry.weight == 0:
            del self._entries[queue]

    def _level(self) -> float:
        """The contenders' average credit per unit of weight (0 when none contends)."""
        others = [e for e in self._contenders.values() if e.weight > 0]
        return sum(e.credit / e.weight for e in others) / len(others) if others else 0.0

    def _plan(self) -> None:
        """Recompute the fractional shares and their floors (weighted water-fill). Every credit
        must have been settled up to now under the old shares first."""
        self._version += 1
        entries = list(self._contenders.values())
        for e in entries:
            e.share, e.floor, e.capped, e.fractional = float(e.held), e.held, True, False
        # Removed queues (weight 0) keep what they hold and take no part in the split.
        fill = {q: e for q, e in self._contenders.items() if e.weight > 0}
        left = max(0, self._total - sum(e.held for e in entries if e.weight == 0))
        caps = {q: Fraction(e.held + e.demand) for q, e in fill.items()}
        shares = water_fill(Fraction(left), {q: e.weight for q, e in fill.items()}, caps)
        fractions = Fraction(0)  # of the uncapped shares: they add up to whole slots, the remainder
        for q, e in fill.items():
            share = shares[q]
            e.share, e.floor = float(share), math.floor(share)
            e.capped = share == e.held + e.demand
            e.fractional = not e.capped and share != e.floor
            if not e.capped:
                fractions += share - e.floor
        assert fractions.denominator == 1
        self._remainder = int(fractions)

    def _targets(self, now: float) -> dict[str, int]:
        """Every contender's integer target. Reused while nothing changed and the clock moved
        less than `_RERANK_AFTER` (credits drift by at most that many slot-seconds meanwhile),
        so a storm of dispatchers asking at once costs one ranking, not one each."""
        cached = self._cache
        if cached is not None and cached[0] == self._version and 0 <= now - cached[1] <= _RERANK_AFTER:
            return cached[2]
        targets = {q: e.floor for q, e in self._contenders.items()}
        if self._remainder > 0:
            for *_, queue in sorted(self._ranked(now), key=_RANK)[: self._remainder]:
                targets[queue] += 1
        self._cache = (self._version, now, targets)
        return targets

    def _target(self, queue: str, now: float) -> int:
        """One contender's target (0 for a queue that does not contend)."""
        entry = self._contenders.get(queue)
        if entry is None:
            return 0
        if self._remainder <= 0 or not entry.fractional:
            return entry.floor
        return self._targets(now)[queue]

    def _ranked(self, now: float) -> list[_RankKey]:
        """Sort keys (`_rank_key`) of the contenders whose share has a fractional part."""
        return [self._rank_key(queue, e, now) for queue, e in self._contenders.items() if e.fractional]

    @staticmethod
    def _rank_key(queue: str, e: _Entry, now: float) -> _RankKey:
        """Most owed per unit of weight first; on a tie (within `_CREDIT_TIE`, see `_rank_order`) the
        one furthest below its share now, then the one granted longest ago (so ties rotate instead of
        going to the first-configured queue)."""
        gap = e.share - e.held
        owed = (e.credit + gap * max(0.0, now - e.stamp)) / max(e.weight, 1)
        return (-owed, -gap, e.last_grant, queue)

    def _credit(self, entry: _Entry, now: float) -> float:
        return entry.credit + (entry.share - entry.held) * max(0.0, now - entry.stamp)

    def _settle(self, entry: _Entry, now: float) -> None:
        """Bring one contender's credit up to `now`, before its held count or share changes."""
        if entry.stamp < now:
            entry.credit = self._credit(entry, now)
            entry.stamp = now

    def _settle_all(self, now: float) -> None:
        for entry in self._contenders.values():
            self._settle(entry, now)

    def _advance(self, now: float | None) -> float:
        if now is not None and now > self._now:
            self._now = now
        return self._now

    # --- helpers -----------------------------------------------------------------

    def _known(self, queue: str) -> _Entry:
        entry = self._entries.get(queue)
        if entry is None or entry.weight == 0:
            raise self._unknown(queue)
        return entry

    def _entry(self, queue: str, *, removed_ok: bool) -> _Entry:
        entry = self._entries.get(queue)
        if entry is None or (entry.weight == 0 and not removed_ok):
            raise self._unknown(queue)
        return entry

    def _unknown(self, queue: str) -> KeyError:
        known = ", ".join(repr(q) for q, e in self._entries.items() if e.weight) or "none"
        return KeyError(f"queue {queue!r} is not in this overflow pool (its queues: {known})")

    def __iter__(self) -> Iterator[str]:
        return iter(q for q, e in self._entries.items() if e.weight)
