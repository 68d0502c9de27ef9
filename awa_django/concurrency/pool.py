"""The shared overflow pool of weighted mode, and its fairness rule.

**Who contends.** A queue contends while it holds overflow permits or has *demand*: the
number of further slots it could use right now, as its dispatcher last said
(`try_acquire(queue, wanted)` records `wanted`; `try_acquire(queue, 0)` clears it). The
dispatcher asks only when it knows of backlog and has rate tokens, and clears its demand
when a claim comes back short or the queue is paused, so an empty, paused or rate-starved
queue does not contend. A queue's *cap* is what it could use: `held + demand`.

**Fractional shares: the weighted water-fill** of `awa_django.concurrency.waterfill`, the
rule fair keys share: the pool's `total` among the contenders by weight, none above its cap.
With one contender its share is the whole pool (work-conserving).

**Integer targets: a credit ledger rotates the remainder.** Each contender earns credit at
the rate `share - held` (slot-seconds, on the clock passed in): a queue below its share
gains, one above it pays. Every queue's integer *target* is `floor(share)` (or its cap,
when capped); the `R` slots left over (`R` < number of contenders) go, one each, to the
uncapped contenders with the most credit per unit of weight (then the one furthest below its
share, then the one granted longest ago). Per unit of weight, so that what a contender leaves
unused (it waits for a slot, or for rate tokens) is taken up by the others in proportion to
their weights, not by whoever happens to claim it. A queue is granted up to `target - held`,
never more than is free, and `sum(targets) <= total`. Since a queue holding a remainder slot
pays for it and one without it earns, the remainder rotates, and every contender's average
held count approaches its fractional share: the credit of each stays bounded by its longest
job's run time.

A queue that starts contending joins level, per unit of weight, with the average contender,
less any debt it left with: a queue that stops contending (it ran dry, or out of rate tokens)
loses what it was owed ("use it or lose it") but still owes what it took beyond its share, so
a queue that contends in bursts cannot take more than its share by leaving between them; the
debt halves every `DEBT_HALF_LIFE` seconds it stays away.

Nothing is taken back: a queue above its target (the targets moved while it held) keeps
its permits until it releases them, and gets nothing new until it is below its target.
After a `reconfigure` that shrinks the total below what is held, nothing is granted until
the sum is back under it.

Cost: the pool keeps its state incrementally, so no decision walks every contender.
Credits run on one shared clock of "share per unit of weight" (`S`), so a change of shares
settles no one; the water-fill walks buckets of contenders with equal cap per weight (`d`
of them: distinct `cap/weight` values, few in practice) instead of contenders; the
remainder goes to the first `R` of per-(held, weight) groups kept sorted by standing, merged
lazily (`R <= total`). A grant or release is O(log c + d); a ranking is O(R log g) for g
groups, reused as before while nothing changed. A bucket whose side of the water level
changes settles its members once. Queues that do not contend cost nothing.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key
from operator import attrgetter

from awa_django.concurrency.validation import check_count, is_int
from awa_django.concurrency.waterfill import water_level
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
# One rank group as `_top` merges it: its items (kept sorted by standing), the shift that turns a
# standing into an owed amount now, and the group's gap below its share.
_Group = tuple[list[tuple[float, float, str]], float, float]

# How an attached contender's credit is kept (see `_Entry`).
_UNCAPPED, _CAPPED, _REMOVED = 1, 2, 3


def _rank_order(a: _RankKey, b: _RankKey) -> int:
    """Compare two `_rank_key`s: most owed first, owed amounts within `_CREDIT_TIE` tied."""
    if abs(a[0] - b[0]) > _CREDIT_TIE:
        return -1 if a[0] < b[0] else 1
    return (a[1:] > b[1:]) - (a[1:] < b[1:])


_RANK = cmp_to_key(_rank_order)
_TIER = attrgetter("caps", "weights")  # a bucket as the water-fill walks it


def _run(
    items: list[tuple[float, float, str]], neg_gap: float, start: int, end: int
) -> Iterator[tuple[float, float, str]]:
    """One group's queues of equal standing, in tie-break order."""
    for index in range(start, end):
        yield (neg_gap, items[index][1], items[index][2])


def _checked_weights(weights: Mapping[str, int]) -> dict[str, int]:
    for queue, weight in weights.items():
        if not (is_int(weight) and weight >= 1):
            raise InvalidWeightError(queue, weight)
    return dict(weights)


@dataclass(slots=True, eq=False)
class _Entry:
    """One queue's standing in the pool.

    A contender's credit is `credit` at `stamp` (pool time, `_tau`) plus what it earned since at
    its current rate, which depends on how it is kept (`kind`): uncapped, it earns its weight
    times the pool's share clock `S` since `mark` (S at `stamp`) less what it held; capped, its
    share is its cap and it earns its demand per second; removed (weight 0), nothing.
    """

    weight: int  # 0 once removed by `reconfigure` (it keeps its held permits until released)
    queue: str = ""
    held: int = 0
    demand: int = 0
    credit: float = 0.0  # slot-seconds below (+) or above (-) its share, up to `stamp`
    stamp: float = 0.0  # pool time of `credit`; while not contending, when it left
    mark: float = 0.0  # the share clock S at `stamp` (uncapped only)
    last_grant: float = float("-inf")
    debt: float = 0.0  # per unit of weight, below the others' average, kept while it does not contend
    kind: int = 0  # 0 while detached (or not contending), else _UNCAPPED / _CAPPED / _REMOVED
    bucket: tuple[int, int] | None = None
    item: tuple[float, float, str] | None = None  # its place in its rank group (uncapped)
    part: tuple[float, float, float] = (0.0, 0.0, 0.0)  # its term of the level sums

    @property
    def contending(self) -> bool:
        return self.held > 0 or (self.demand > 0 and self.weight > 0)


@dataclass(slots=True, eq=False)
class _Bucket:
    """Attached contenders with one cap-per-weight ratio: the water-fill caps them all or none."""

    entries: dict[str, _Entry] = field(default_factory=dict)
    caps: int = 0
    weights: int = 0
    capped: bool = False


class OverflowPool:
    """`total` permits shared by weighted queues; see the module docstring for the rule.

    Every method that changes something or depends on the ledger takes `now` (seconds on
    any monotonic clock); without it the pool uses the latest time it was given, so a
    caller that never passes time gets the same targets without rotation over time.
    """

    __slots__ = (
        "_buckets",
        "_cache",
        "_contenders",
        "_entries",
        "_floors",
        "_groups",
        "_held_total",
        "_left",
        "_level_at",
        "_now",
        "_order",
        "_origin",
        "_rate",
        "_remainder",
        "_removed_held",
        "_s_stamp",
        "_s_value",
        "_sums",
        "_total",
        "_unc_weight",
        "_unc_weights",
        "_version",
        "_weight_all",
    )

    def __init__(self, total: int, weights: Mapping[str, int], *, now: float | None = None) -> None:
        check_count("total", total)
        self._total = total
        self._entries: dict[str, _Entry] = {q: _Entry(w, q) for q, w in _checked_weights(weights).items()}
        self._contenders: dict[str, _Entry] = {}
        self._held_total = 0
        self._now = 0.0 if now is None else now
        # Pool time runs from here, so the share clock and credits stay small numbers whatever the clock.
        self._origin = self._now
        self._remainder = 0
        self._version = 0
        self._cache: tuple[int, float, list[str], frozenset[str]] | None = None
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._order: list[tuple[float, int, int]] = []  # bucket keys by cap per weight, ascending
        self._groups: dict[tuple[int, int], list[tuple[float, float, str]]] = {}  # (held, weight) -> items
        self._unc_weights: Counter[int] = Counter()
        self._unc_weight = 0
        self._weight_all = 0
        self._removed_held = 0
        self._left = 0
        self._rate = 0.0  # share per unit of weight of the uncapped contenders
        self._s_value = 0.0
        self._s_stamp = 0.0
        self._floors: dict[int, tuple[int, bool]] = {}
        self._sums = [0.0, 0.0, 0.0, 0]  # the level: sum P, sum Q (x S), sum R (x t), count
        self._level_at: tuple[float, float] | None = None

    def __repr__(self) -> str:
        held = {q: e.held for q, e in self._entries.items()}
        demand = {q: e.demand for q, e in self._entries.items() if e.weight}
        return f"OverflowPool(total={self._total}, held={held!r}, demand={demand!r})"

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
        return 0.0 if entry is None else self._share(entry)

    def credit(self, queue: str, *, now: float | None = None) -> float:
        """Slot-seconds the queue is owed (+) or has had beyond its share (-) while contending."""
        entry = self._known(queue)
        self._advance(now)
        return self._credit(entry, self._tau()) if queue in self._contenders else 0.0

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
        self._set_demand(entry, large)
        try:
            return self._target(queue, now)
        finally:
            self._set_demand(entry, saved)

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
        top, _ = self._top(now)
        below: list[_Entry] = []
        for bucket in self._buckets.values():
            if bucket.capped:  # a capped queue's target is its cap: it is below it while it has demand
                below.extend(e for e in bucket.entries.values() if e.demand > 0)
        for (held, weight), items in self._groups.items():
            if items and held < self._floor(weight)[0]:
                below.extend(self._entries[item[2]] for item in items)
        entries = self._entries
        rest = [q for q in top if entries[q].held == self._floor(entries[q].weight)[0] and entries[q].demand > 0]
        if not below:
            return rest  # already most owed first
        below.extend(entries[q] for q in rest)
        tau = self._tau()
        below.sort(key=lambda e: _RANK(self._rank_key(e, tau, now)))
        return [e.queue for e in below]

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

    def try_acquire(self, queue: str, wanted: int, *, now: float | None = None, limit: int | None = None) -> int:
        """Record `wanted` as the queue's demand and grant what the rule allows, and at most
        `limit` (the caller's own headroom); never blocks. What is not granted stays demand.

        `try_acquire(queue, 0)` clears the demand: a queue holding nothing then stops
        contending (and forgets its credit).
        """
        entry = self._known(queue)
        check_count("wanted", wanted)
        now = self._advance(now)
        self._set_demand(entry, wanted)
        if wanted == 0 or self._held_total >= self._total:
            return 0  # nothing is free: no need to rank anyone
        granted = max(0, min(wanted, self.available, self._target(queue, now) - entry.held))
        if limit is not None:
            granted = min(granted, max(0, limit))
        if granted:
            # held + demand (the cap) is unchanged, and with it every share.
            tau = self._tau()
            self._detach(entry, tau)
            entry.held += granted
            entry.demand = wanted - granted
            entry.last_grant = now
            self._attach(entry, tau)
            self._held_total += granted
            # The ranking stands (no `_version` bump): a grant goes to a queue within its target and
            # leaves every share, the remainder and every other target as they were. Only the
            # granted queue's tie-breaks moved (it now holds more, and was granted last), so a
            # ranking taken again could only rotate it out of a tie; that waits for the next one
            # (a release, a change of demand, or `_RERANK_AFTER`). With 1,000 queues contending
            # for 50 slots, re-ranking after every grant was a third of the weighted worker's
            # extra time over hard-reserved mode.
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
        self._advance(now)
        tau = self._tau()
        self._detach(entry, tau)
        entry.held -= n
        self._held_total -= n
        self._version += 1
        if entry.demand > 0 and entry.weight > 0:
            entry.demand += n
            self._attach(entry, tau)
            return
        if entry.contending:
            self._attach(entry, tau)
        else:
            self._leave(entry, tau)
        self._plan(tau)

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
        tau = self._tau()
        for queue, (held, demand) in uses.items():
            entry = self._entries[queue]
            was = queue in self._contenders
            if was:
                self._detach(entry, tau)
            if held > entry.held:
                entry.last_grant = now
            self._held_total += held - entry.held
            entry.held, entry.demand = held, demand
            self._rejoin(entry, was, tau)
        self._plan(tau)

    def reconfigure(self, total: int, weights: Mapping[str, int], *, now: float | None = None) -> None:
        """Change the total and the weights live; validated before anything changes.

        Permits already held stay held and are released normally; a queue removed from
        `weights` keeps its held count (it still uses up the pool) until it releases it.
        """
        check_count("total", total)
        new_weights = _checked_weights(weights)
        self._advance(now)
        tau = self._tau()
        for entry in self._contenders.values():
            self._detach(entry, tau)
        self._sums = [0.0, 0.0, 0.0, 0]  # every term is out; start the sums afresh
        self._level_at = None
        self._total = total
        for queue, entry in list(self._entries.items()):
            if queue not in new_weights:
                entry.weight = 0
                entry.demand = 0
                if queue in self._contenders and not entry.contending:
                    self._leave(entry, tau)
                elif not entry.contending:
                    del self._entries[queue]
        for queue, weight in new_weights.items():
            entry = self._entries.setdefault(queue, _Entry(weight, queue, stamp=tau))
            entry.weight = weight
        for entry in self._contenders.values():
            self._attach(entry, tau)
        self._plan(tau)

    # --- the rule ------------------------------------------------------------------

    def _set_demand(self, entry: _Entry, demand: int) -> None:
        if entry.demand != demand:
            tau = self._tau()
            was = entry.queue in self._contenders
            stays = was and entry.kind == _UNCAPPED
            before = (self._left, self._unc_weight, self._remainder)
            if was:
                self._detach(entry, tau)
            entry.demand = demand
            self._rejoin(entry, was, tau)
            version = self._version
            flipped = self._plan(tau)
            after = (self._left, self._unc_weight, self._remainder)
            if stays and entry.kind == _UNCAPPED and not flipped and after == before:
                # An uncapped contender's demand moved and it stayed uncapped, with no bucket across
                # the level: every share, floor and the remainder are as they were, and so is what
                # the ranking compares (credits and tie-breaks). The ranking stands. (A dispatcher
                # asking again for what it asked before a grant moves its demand each time.)
                self._version = version

    def _rejoin(self, entry: _Entry, was: bool, tau: float) -> None:
        """After a detached change: join, stay (attached again) or leave, as `entry.contending` says."""
        if entry.contending:
            if not was:
                self._join(entry, tau)
            self._attach(entry, tau)
        elif was:
            self._leave(entry, tau)

    def _join(self, entry: _Entry, tau: float) -> None:
        """A queue that joins starts level, per unit of weight, with the average contender, less
        any debt it left with: a queue that stops contending (it ran dry, or out of rate tokens)
        loses what it was owed ("use it or lose it"), but what it took beyond its share is still
        owed when it comes back (halving every DEBT_HALF_LIFE seconds away), so a queue that
        contends in bursts cannot take more than its share by leaving between them."""
        away = max(0.0, tau - entry.stamp)  # stamp: when it left
        debt = entry.debt * 0.5 ** (away / DEBT_HALF_LIFE)
        entry.credit = (self._level(tau) + debt) * entry.weight
        if debt:
            self._level_at = None  # joining at the level leaves the average as it was; a debt moves it
        entry.debt = 0.0
        entry.stamp = tau
        self._contenders[entry.queue] = entry

    def _leave(self, entry: _Entry, tau: float) -> None:
        """A detached contender stops contending (see `_join`); a removed queue is forgotten."""
        del self._contenders[entry.queue]
        self._level_at = None
        if entry.weight > 0:
            entry.debt = min(0.0, entry.credit / entry.weight - self._level(tau))
        entry.credit = 0.0
        entry.stamp = tau
        if entry.weight == 0:
            del self._entries[entry.queue]

    def _level(self, tau: float) -> float:
        """The contenders' average credit per unit of weight (0 when none contends)."""
        cached = self._level_at
        if cached is not None and cached[0] == tau:
            return cached[1]
        p, q, r, n = self._sums
        level = (p + q * self._share_clock(tau) + r * tau) / n if n else 0.0
        self._level_at = (tau, level)
        return level

    def _share_clock(self, tau: float) -> float:
        """S: slot-seconds per unit of weight an uncapped contender has been due since the origin."""
        return self._s_value + self._rate * (tau - self._s_stamp)

    def _credit(self, entry: _Entry, tau: float) -> float:
        """An attached contender's credit at pool time `tau`."""
        if entry.kind == _UNCAPPED:
            return (
                entry.credit
                + entry.weight * (self._share_clock(tau) - entry.mark)
                - entry.held * max(0.0, tau - entry.stamp)
            )
        if entry.kind == _CAPPED:
            return entry.credit + entry.demand * max(0.0, tau - entry.stamp)
        return entry.credit

    def _detach(self, entry: _Entry, tau: float) -> None:
        """Settle a contender's credit at `tau` and take it out of every structure (it stays in
        `_contenders`), before its held count, demand or weight changes."""
        kind = entry.kind
        if kind == 0:
            return
        entry.credit = self._credit(entry, tau)
        entry.stamp = tau
        entry.kind = 0
        if kind == _REMOVED:
            self._removed_held -= entry.held
            return
        self._unterm(entry)
        if kind == _UNCAPPED:
            self._ungroup(entry)
        key = entry.bucket
        assert key is not None
        bucket = self._buckets[key]
        del bucket.entries[entry.queue]
        bucket.caps -= entry.held + entry.demand
        bucket.weights -= entry.weight
        self._weight_all -= entry.weight
        entry.bucket = None  # an emptied bucket stays, on its side of the level, until `_plan`

    def _attach(self, entry: _Entry, tau: float) -> None:
        """Put a detached contender (credit settled at `tau`) back: into the bucket of its cap per
        weight, kept as that bucket is until `_plan` moves the bucket across the water level."""
        entry.stamp = tau
        if entry.weight == 0:
            entry.kind = _REMOVED
            self._removed_held += entry.held
            return
        cap = entry.held + entry.demand
        divisor = math.gcd(cap, entry.weight)
        key = (cap // divisor, entry.weight // divisor)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
            insort(self._order, (key[0] / key[1], *key))
        bucket.entries[entry.queue] = entry
        bucket.caps += cap
        bucket.weights += entry.weight
        self._weight_all += entry.weight
        entry.bucket = key
        self._keep(entry, _CAPPED if bucket.capped else _UNCAPPED, tau)

    def _keep(self, entry: _Entry, kind: int, tau: float) -> None:
        """Keep an attached contender's settled credit as `kind`: its level term and rank group."""
        entry.kind = kind
        w = entry.weight
        if kind == _UNCAPPED:
            entry.mark = self._share_clock(tau)
            h = entry.held / w
            standing = entry.credit / w - entry.mark + h * tau  # credit per weight at t is this + S(t) - h t
            entry.part = (standing, 1.0, -h)
            entry.item = (-standing, entry.last_grant, entry.queue)
            insort(self._groups.setdefault((entry.held, w), []), entry.item)
            self._unc_weights[w] += 1
            self._unc_weight += w
        else:
            g = entry.demand / w
            entry.part = (entry.credit / w - g * tau, 0.0, g)
        sums = self._sums
        sums[0] += entry.part[0]
        sums[1] += entry.part[1]
        sums[2] += entry.part[2]
        sums[3] += 1

    def _unterm(self, entry: _Entry) -> None:
        sums = self._sums
        sums[3] -= 1
        if sums[3] == 0:
            self._sums = [0.0, 0.0, 0.0, 0]  # exactly empty, whatever the rounding of the terms
            return
        sums[0] -= entry.part[0]
        sums[1] -= entry.part[1]
        sums[2] -= entry.part[2]

    def _ungroup(self, entry: _Entry) -> None:
        items = self._groups[(entry.held, entry.weight)]
        assert entry.item is not None
        del items[bisect_left(items, entry.item)]
        if not items:
            del self._groups[(entry.held, entry.weight)]
        entry.item = None
        self._unc_weights[entry.weight] -= 1
        if not self._unc_weights[entry.weight]:
            del self._unc_weights[entry.weight]
        self._unc_weight -= entry.weight

    def _plan(self, tau: float) -> bool:
        """Recompute the weighted water-fill over the buckets, moving the buckets that cross the
        water level (each member settled under the old rate first); whether any bucket moved."""
        self._version += 1
        self._s_value = self._share_clock(tau)
        self._s_stamp = tau
        empty = [key for key, bucket in self._buckets.items() if not bucket.entries]
        for key in empty:
            del self._buckets[key]
            del self._order[bisect_left(self._order, (key[0] / key[1], *key))]
        # Removed queues (weight 0) keep what they hold and take no part in the split.
        buckets = [self._buckets[(cap, per)] for _, cap, per in self._order]
        capped, left, _ = water_level(self._total - self._removed_held, map(_TIER, buckets), self._weight_all)
        flipped = False
        for index, bucket in enumerate(buckets):
            if bucket.capped != (index < capped):
                self._flip(bucket, tau)
                flipped = True
        self._left = left
        self._rate = left / self._unc_weight if self._unc_weight else 0.0
        self._floors = {}
        self._remainder = (
            left - sum(n * self._floor(w)[0] for w, n in self._unc_weights.items()) if self._unc_weight else 0
        )
        return flipped

    def _flip(self, bucket: _Bucket, tau: float) -> None:
        bucket.capped = not bucket.capped
        for entry in bucket.entries.values():
            entry.credit = self._credit(entry, tau)
            entry.stamp = tau
            self._unterm(entry)
            if entry.kind == _UNCAPPED:
                self._ungroup(entry)
            self._keep(entry, _CAPPED if bucket.capped else _UNCAPPED, tau)

    def _floor(self, weight: int) -> tuple[int, bool]:
        """An uncapped contender's integer share by weight, and whether a fraction is left over:
        exact, whatever the float rounding."""
        known = self._floors.get(weight)
        if known is None:
            whole, rest = divmod(self._left * weight, self._unc_weight)
            known = self._floors[weight] = (whole, rest > 0)
        return known

    def _share(self, entry: _Entry) -> float:
        if entry.kind == _UNCAPPED:
            return self._left * entry.weight / self._unc_weight
        if entry.kind == _CAPPED:
            return float(entry.held + entry.demand)
        return float(entry.held)

    def _target(self, queue: str, now: float) -> int:
        """One contender's target (0 for a queue that does not contend)."""
        entry = self._contenders.get(queue)
        if entry is None:
            return 0
        if entry.kind != _UNCAPPED:
            return entry.held + (entry.demand if entry.kind == _CAPPED else 0)
        whole, fractional = self._floor(entry.weight)
        if self._remainder <= 0 or not fractional:
            return whole
        return whole + (queue in self._top(now)[1])

    def _top(self, now: float) -> tuple[list[str], frozenset[str]]:
        """The `_remainder` uncapped contenders with a fractional share that get one slot over
        their floor, most owed first. Reused while nothing changed and the clock moved less than
        `_RERANK_AFTER` (credits drift by at most that many slot-seconds meanwhile), so a storm of
        dispatchers asking at once costs one ranking, not one each. A grant, or an uncapped
        contender's demand moving with every share as it was, changes nothing here (see
        `try_acquire` and `_set_demand`).

        Each group of equal held count and weight is kept sorted by standing, which time does not
        reorder; the groups are merged lazily until `_remainder` are taken and the run of owed
        amounts within `_CREDIT_TIE` of the last one is complete; within such a run the
        tie-breaks decide. Queues with one standing in a group (as queues that joined at once
        have) are taken as a block, already in tie-break order."""
        cached = self._cache
        if cached is not None and cached[0] == self._version and 0 <= now - cached[1] <= _RERANK_AFTER:
            return cached[2], cached[3]
        wanted = self._remainder
        order: list[str] = []
        if wanted > 0:
            tau = self._tau()
            clock = self._share_clock(tau)
            groups: list[_Group] = []
            for (held, weight), items in self._groups.items():
                if self._floor(weight)[1]:
                    gap = self._left * weight / self._unc_weight - held
                    groups.append((items, clock - held / weight * tau, gap))
            untied = self._top_untied(groups, wanted)
            order = untied if untied is not None else self._top_merged(groups, wanted)
        top = (order, frozenset(order))
        self._cache = (self._version, now, *top)
        return top

    @staticmethod
    def _top_merged(groups: list[_Group], wanted: int) -> list[str]:
        """The first `wanted` of the groups (items, shift, gap), merged lazily by owed amount
        (an item's owed is its standing plus its group's shift), ties within `_CREDIT_TIE` taken
        whole and ordered by the tie-breaks."""
        heap: list[tuple[float, float, float, str, int, int]] = []
        for g, (items, shift, gap) in enumerate(groups):
            head = items[0]
            heap.append((head[0] - shift, -gap, head[1], head[2], g, 0))
        heapq.heapify(heap)
        order: list[str] = []
        # runs: (owed, -gap, group, start, end), in merged order
        runs: list[tuple[float, float, int, int, int]] = []
        taken = 0
        while heap:
            neg_owed, neg_gap, _, _, g, start = heap[0]
            owed = -neg_owed
            if taken >= wanted and runs[-1][0] - owed > _CREDIT_TIE:
                break
            heapq.heappop(heap)
            items, shift, _ = groups[g]
            end = bisect_right(items, (items[start][0], math.inf))
            runs.append((owed, neg_gap, g, start, end))
            taken += end - start
            if end < len(items):
                head = items[end]
                heapq.heappush(heap, (head[0] - shift, neg_gap, head[1], head[2], g, end))
        chain: list[tuple[float, float, int, int, int]] = []
        for run in [*runs, None]:
            if run is not None and (not chain or chain[-1][0] - run[0] <= _CREDIT_TIE):
                chain.append(run)
                continue
            size = sum(end - start for *_, start, end in chain)
            count = min(wanted - len(order), size)
            if len(chain) == 1:  # one block of one standing: already in tie-break order
                _, _, g, start, _ = chain[0]
                order.extend(item[2] for item in groups[g][0][start : start + count])
            else:
                runs_of = (_run(groups[g][0], neg_gap, start, end) for _, neg_gap, g, start, end in chain)
                order.extend(item[2] for item in itertools.islice(heapq.merge(*runs_of), count))
            if len(order) >= wanted or run is None:
                break
            chain = [run]
        del order[wanted:]
        return order

    @staticmethod
    def _top_untied(groups: list[_Group], wanted: int) -> list[str] | None:
        """The first `wanted` of the merged groups when no tie-break can matter, else None.

        Each group's first `wanted + 1` items hold every candidate for the first `wanted + 1`
        overall; sorted by owed amount (C's sort, not a Python merge), they are the ranking
        itself if each differs from the next by more than `_CREDIT_TIE`: then `_top_merged`
        would take one queue per run and close each run at once. A ranking of 50 of 1,000
        contenders took 231 us by the merge, 50 us this way (`_top` whole). Ties (queues that
        joined at one instant, say) go to the merge."""
        limit = wanted + 1
        if sum(min(len(items), limit) for items, _, _ in groups) > 4 * limit:
            return None  # many groups: the lazy merge takes fewer steps
        merged = [(item[0] - shift, item[2]) for items, shift, _ in groups for item in items[:limit]]
        merged.sort()
        owed = [pair[0] for pair in merged[:limit]]
        if any(b - a <= _CREDIT_TIE for a, b in itertools.pairwise(owed)):
            return None
        return [pair[1] for pair in merged[:wanted]]

    def _rank_key(self, e: _Entry, tau: float, now: float) -> _RankKey:
        """Most owed per unit of weight first; on a tie (within `_CREDIT_TIE`, see `_rank_order`) the
        one furthest below its share now, then the one granted longest ago (so ties rotate instead of
        going to the first-configured queue)."""
        gap = self._share(e) - e.held
        owed = self._credit(e, tau) / max(e.weight, 1)
        return (-owed, -gap, e.last_grant, e.queue)

    def _advance(self, now: float | None) -> float:
        if now is not None and now > self._now:
            self._now = now
        return self._now

    def _tau(self) -> float:
        return self._now - self._origin

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
