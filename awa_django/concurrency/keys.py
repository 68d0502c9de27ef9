"""Fair shares of one queue's slots among its fair keys: the rule, proven before it is wired.

A job may carry a *fair key* (``"tenant:42"``; jobs without one share the default key ``""``).
The queue's slots, however its mode gives them (``max_workers``, or floor plus overflow share),
are shared among the keys that have due jobs, in proportion to each key's weight, no key above
its cap (``max_running``), what a capped key cannot use going to the others: the weighted
water-fill of ``awa_django.concurrency.waterfill``, the rule the queues' overflow pool shares
(the admin reads each key's share in force from it). It is work-conserving: a lone key uses
every slot. Priority orders a key's own jobs and never reaches across keys, so one key's flood
of priority-1 jobs cannot starve another key's priority-2 job.

**How the integer slots rotate: fair queueing on slot-seconds.** Each key has a *tag*, the
slot-seconds it has been served per unit of weight: the run time of its finished attempts plus,
for each attempt still running, its estimated run time (the key's moving average), divided by
its weight. A free slot goes to the eligible key (it has due jobs and is below its cap) with the
lowest tag, compared in whole quanta (below); ties go to the key with fewer attempts running, then
to the one whose next job lies furthest back, then to the one served longest ago.
Granting a slot raises the key's tag by its estimate, and the attempt's end corrects the estimate
with the real run time, so tags of continuously backlogged keys stay within one attempt's charge
of each other: each key's slot-seconds, and so its average running count, approach its weighted
water-fill share. A batch of n slots is n such picks, so one claim spreads across keys.

**Joining.** A key that gets due jobs again joins at the *virtual time* (the lowest tag served
so far), never below it: an idle key does not bank credit while it is away ("use it or lose
it"), and one that took more than its share keeps that debt while the allocator remembers it.
A key at its cap (or held back by a cap that holds across workers) falls behind while its
weighted share is above its cap; that lag only makes it take back each slot it releases, which
is exactly its water-filled share (its cap), and a change of its weight or cap sets it level
again, so the lag can never turn into a burst.
A joining key joins lower than the virtual time in one case: when the first key in line, if
uncapped (a capped key's lag is the one above), has been served less (per weight, its running
attempts' charges left out), it joins there. Those charges are estimates corrected at each end,
so a key whose run times fell lies below the virtual time; placed level with what it has
finished, the newcomer lies at or below it until its first grant, and wins the tie when it has
fewer running: a key that gets a due job is served within about as many slot grants as there are
keys in its quantum, however deep the others' backlogs are, and however their run times moved.

**Order within a quantum: the oldest next job first.** Keys are placed by their tag in whole
*quanta* (one attempt's charge at the heaviest weight configured, from a slow average of the
queue's run times, halved: so no key's place is off by more than about one of its attempts), and
among the keys of one quantum the one whose next job lies furthest back (its *position*, a job id:
``offer`` and ``near`` tell it) goes first. Keys served equally are thus served oldest job first,
across keys as the plain claim does, and one claim's jobs lie close together in the table instead
of one per key wherever the rotation happened to put them: that locality is most of the database's
cost per keyed job (bench/README.md). It is also an order every worker reads from the same table,
so claimers sharing a capped key agree on it more than on their own rotations. A key's place is off
by at most two quanta (one charge), never its share: the tags themselves stay exact. A quantum that
drifts more than twice away from the run times places every key again, at most once per as many
attempts' ends as there are keys.

**Cost and memory.** A pick is O(log k) in the number of eligible keys (a heap with lazy deletion);
nothing here walks every key but that rare re-placement. An attempt's end leaves its key's heap
entry where it is unless its tag fell more than a quantum below it (then it is placed again); a
pick that meets an entry whose tag rose past its quantum places it again instead of granting. So
the common end costs no heap operation and each key keeps about one entry. A key that is neither
running nor backlogged is kept
only in a bounded most-recently-used table (``memory`` keys), so keys that go idle leave no
unbounded state behind; forgetting a key forgives at most its debt.

Pure: no clock, no I/O. Run times are passed in. The cap here is this allocator's own view; a
cap that must hold across every worker sharing the database is enforced where the claim runs.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from awa_django.concurrency.validation import check_count, is_int

DEFAULT_KEY = ""
KEY_MEMORY_DEFAULT = 10_000  # idle keys remembered (their debt and run-time estimate)
_ESTIMATE_FLOOR = 1e-6  # seconds: a grant always costs something, so ties always move on
_ESTIMATE_SMOOTHING = 0.2  # weight of the newest run time in a key's moving average
_SLOW_SMOOTHING = 0.02  # weight of the newest run time in the average that sets the quantum
_QUANTUM_SHARE = 0.5  # of one attempt's charge at the heaviest weight: the quantum
_QUANTUM_DRIFT = 2.0  # the quantum is set again when that average is this many times above or below it

# A heap entry: (quantum index of the tag, running, position, last grant, key, the tag itself).
_Item = tuple[float, int, int, int, str, float]


@dataclass(slots=True)
class _Key:
    weight: int
    cap: int | None
    served: float = 0.0  # slot-seconds of finished attempts
    running: int = 0
    backlog: int = 0  # due jobs known and not yet granted (a hint; a short claim zeroes it)
    blocked: bool = False  # held back elsewhere (a cluster-wide cap): not picked until unblocked
    estimate: float | None = None  # moving average of this key's run times
    last_grant: int = -1  # grant sequence number, for the tie-break
    position: int = 0  # where its next job lies (about: a job id), the order within a quantum
    heaped: _Item | None = None  # its live heap entry (any other of its key is stale)

    def tag(self, fallback: float) -> float:
        estimate = self.estimate if self.estimate is not None else fallback
        return (self.served + self.running * max(estimate, _ESTIMATE_FLOOR)) / self.weight

    @property
    def eligible(self) -> bool:
        return self.backlog > 0 and not self.blocked and (self.cap is None or self.running < self.cap)

    @property
    def idle(self) -> bool:
        return self.backlog == 0 and self.running == 0


def _check_weight(key: str, weight: object) -> int:
    if not (is_int(weight) and weight >= 1):
        raise ValueError(f"weight of fair key {key!r} must be an integer of at least 1, got {weight!r}")
    return weight


def _check_cap(key: str, cap: object) -> int | None:
    if cap is None:
        return None
    if not (is_int(cap) and cap >= 1):
        raise ValueError(f"max_running of fair key {key!r} must be an integer of at least 1 or None, got {cap!r}")
    return cap


class KeyShares:
    """One queue's fair keys and the slots among them; see the module docstring for the rule.

    The runner tells it what it learns: ``offer(key, n)`` when n due jobs of a key are seen,
    ``pick(n)`` for n permits in hand (the grants, key by key), ``returned(key, granted, claimed)``
    after the claim, and ``finished(key, seconds)`` when an attempt ends.
    """

    def __init__(
        self,
        *,
        default_weight: int = 1,
        default_cap: int | None = None,
        weights: Mapping[str, int] | None = None,
        caps: Mapping[str, int | None] | None = None,
        memory: int = KEY_MEMORY_DEFAULT,
    ) -> None:
        check_count("memory", memory)
        self._keys: dict[str, _Key] = {}  # keys running or backlogged
        self._idle: OrderedDict[str, _Key] = OrderedDict()  # remembered idle keys, oldest first
        self._memory = memory
        self._heap: list[_Item] = []
        self._virtual = 0.0  # the lowest tag granted so far (never decreases)
        self._grants = 0
        self._estimate: float | None = None  # the queue's moving average, for keys with none
        self._slow: float | None = None  # a slower average of the queue's run times, for the quantum
        self._quantum = _ESTIMATE_FLOOR  # tag units per place in the heap's order (see _requantize)
        self._basis = _ESTIMATE_FLOOR  # the run time (seconds) the quantum was last set from
        self._ends = 0  # attempts ended, ...
        self._placed_at = -1  # ... when every key was last placed again (-1: never since the first end)
        self.placements = 0  # times every key was placed again (the O(k) step; a cost's measure)
        self.configure(default_weight=default_weight, default_cap=default_cap, weights=weights, caps=caps)

    # --- configuration -------------------------------------------------------------

    def configure(
        self,
        *,
        default_weight: int = 1,
        default_cap: int | None = None,
        weights: Mapping[str, int] | None = None,
        caps: Mapping[str, int | None] | None = None,
    ) -> None:
        """Set the defaults and the per-key overrides (all of them: a key left out of ``weights``
        or ``caps`` goes back to the default). Running attempts are never taken back: a key above
        a lowered cap gets nothing new until it is below it."""
        self._default_weight = _check_weight("(default)", default_weight)
        self._default_cap = _check_cap("(default)", default_cap)
        self._weights = {key: _check_weight(key, w) for key, w in (weights or {}).items()}
        self._caps = {key: _check_cap(key, c) for key, c in (caps or {}).items()}
        self._heaviest = max(self._default_weight, max(self._weights.values(), default=1))
        level = self._level()  # read before any key's limits change: the line as it stood
        for key, entry in self._keys.items():
            old = (entry.weight, entry.cap)
            entry.weight, entry.cap = self._weight(key), self._cap(key)
            if (entry.weight, entry.cap) != old:
                self._join(entry, level)
        self._requantize()  # every key placed again, at the quantum of the heaviest weight
        for key, entry in self._idle.items():
            entry.weight, entry.cap = self._weight(key), self._cap(key)

    def _weight(self, key: str) -> int:
        return self._weights.get(key, self._default_weight)

    def _cap(self, key: str) -> int | None:
        return self._caps[key] if key in self._caps else self._default_cap

    # --- reading -------------------------------------------------------------------

    def running(self, key: str) -> int:
        entry = self._keys.get(key)
        return 0 if entry is None else entry.running

    def backlog(self, key: str) -> int:
        entry = self._keys.get(key)
        return 0 if entry is None else entry.backlog

    @property
    def active(self) -> frozenset[str]:
        """Keys running or with due jobs known."""
        return frozenset(self._keys)

    @property
    def remembered(self) -> int:
        """How many idle keys are kept (at most ``memory``)."""
        return len(self._idle)

    @property
    def entries(self) -> int:
        """Heap entries held, stale ones included: what picks may have to pop (the cost's measure)."""
        return len(self._heap)

    def has_eligible(self) -> bool:
        """Whether a pick would grant anything (a free slot has a taker)."""
        self._drop_stale()
        return bool(self._heap)

    def tag(self, key: str) -> float:
        entry = self._keys.get(key) or self._idle.get(key)
        return self._virtual if entry is None else entry.tag(self._fallback())

    # --- events --------------------------------------------------------------------

    def offer(self, key: str, count: int = 1, position: int | None = None) -> None:
        """``count`` more due jobs of ``key`` were seen, the first at ``position`` (a job id; it
        places a key that joins, see ``near``)."""
        check_count("count", count)
        if count == 0:
            return
        entry = self._entry(key)
        if entry.backlog == 0:
            if position is not None:
                entry.position = position
            self._join(entry)
            entry.backlog += count
            self._push(key, entry)
            return
        entry.backlog += count
        if entry.heaped is None:
            self._push(key, entry)

    def near(self, key: str, position: int) -> None:
        """The next job of ``key`` lies at about ``position`` (a job id: its last claimed one, or a
        due one seen behind it). Among keys of one quantum the lowest position goes first; this
        takes effect where the key is placed next. A key not known here is left alone."""
        entry = self._keys.get(key)
        if entry is not None:
            entry.position = position

    def pick(self, slots: int) -> dict[str, int]:
        """Grant up to ``slots`` slots, one at a time by the rule; the grants per key.

        Each grant counts as running from now on (``returned`` takes back what the claim did not
        fill), so the caller claims at most that many jobs of each key."""
        check_count("slots", slots)
        grants: dict[str, int] = {}
        fallback = self._fallback()
        heap, keys, quantum = self._heap, self._keys, self._quantum
        while slots > 0 and heap:
            item = heap[0]
            key = item[4]
            entry = keys.get(key)
            if entry is None or entry.heaped is not item or not entry.eligible:
                heapq.heappop(heap)
                if entry is not None and entry.heaped is item:
                    entry.heaped = None
                continue
            charge = max(entry.estimate if entry.estimate is not None else fallback, _ESTIMATE_FLOOR) / entry.weight
            current = entry.served / entry.weight + entry.running * charge
            if current // quantum > item[0]:  # an end raised its tag past its quantum, left lazy: place it again
                entry.heaped = (current // quantum, entry.running, entry.position, entry.last_grant, key, current)
                heapq.heapreplace(heap, entry.heaped)
                continue
            self._virtual = max(self._virtual, min(item[5], current))
            entry.running += 1
            entry.backlog -= 1
            entry.last_grant = self._grants
            self._grants += 1
            grants[key] = grants.get(key, 0) + 1
            slots -= 1
            if entry.eligible:
                tag = current + charge
                entry.heaped = (tag // quantum, entry.running, entry.position, entry.last_grant, key, tag)
                heapq.heapreplace(heap, entry.heaped)
            else:
                heapq.heappop(heap)
                entry.heaped = None
        return grants

    def returned(self, key: str, granted: int, claimed: int, *, dry: bool = True) -> None:
        """The claim for ``granted`` slots of ``key`` took ``claimed`` jobs (``claimed <= granted``).

        A short claim gives the unfilled grants back. With ``dry`` (the default) it also means
        the key has no more due jobs now; ``dry=False`` says the jobs are there but held back
        elsewhere (a cluster-wide cap), so the key waits for ``unblock``."""
        check_count("granted", granted)
        check_count("claimed", claimed)
        if claimed > granted:
            raise ValueError(f"claimed ({claimed}) cannot exceed granted ({granted}) for fair key {key!r}")
        entry = self._keys.get(key)
        unfilled = granted - claimed
        if entry is None or unfilled == 0:
            return
        if unfilled > entry.running:
            raise ValueError(f"fair key {key!r} has {entry.running} running, cannot give back {unfilled}")
        entry.running -= unfilled
        if dry:
            entry.backlog = 0
        else:
            entry.backlog += unfilled
            entry.blocked = True
        self._settle(key, entry)

    def finished(self, key: str, seconds: float) -> None:
        """An attempt of ``key`` ended after holding its slot ``seconds``."""
        if not (type(seconds) is float and -math.inf < seconds < math.inf) and not (
            isinstance(seconds, int | float) and not isinstance(seconds, bool) and math.isfinite(seconds)
        ):  # the first test is the common case's, cheaply
            raise ValueError(f"seconds must be a finite number, got {seconds!r}")
        entry = self._keys.get(key)
        if entry is None or entry.running == 0:
            raise ValueError(f"fair key {key!r} has no attempt running")
        seconds = max(0.0, float(seconds))
        entry.running -= 1
        entry.served += seconds
        entry.estimate = (
            seconds if entry.estimate is None else entry.estimate + _ESTIMATE_SMOOTHING * (seconds - entry.estimate)
        )
        self._estimate = (
            seconds if self._estimate is None else self._estimate + _ESTIMATE_SMOOTHING * (seconds - self._estimate)
        )
        slow = seconds if self._slow is None else self._slow + _SLOW_SMOOTHING * (seconds - self._slow)
        self._slow = slow
        self._settle(key, entry, lazy=True)
        self._ends += 1
        basis = self._basis
        if not basis / _QUANTUM_DRIFT <= max(slow, _ESTIMATE_FLOOR) <= basis * _QUANTUM_DRIFT and (
            self._placed_at < 0 or self._ends - self._placed_at >= len(self._keys)
        ):  # at most once per as many ends as there are keys: O(1) per end, however run times swing
            self._requantize()

    def unblock(self, keys: Iterable[str] | None = None) -> None:
        """Let keys held back by ``returned(..., dry=False)`` be picked again (all, or ``keys``)."""
        for key in list(self._keys) if keys is None else keys:
            entry = self._keys.get(key)
            if entry is not None and entry.blocked:
                entry.blocked = False
                self._push(key, entry)

    # --- internals -----------------------------------------------------------------

    def _requantize(self) -> None:
        """Set the quantum from the slow average of run times and place every key again: O(k), on
        ``configure`` and when the run times drifted by ``_QUANTUM_DRIFT``, at most once per as many
        ends as there are keys (a worker's slot times swing by more than that as its load moves)."""
        self._basis = max(self._slow if self._slow is not None else _ESTIMATE_FLOOR, _ESTIMATE_FLOOR)
        self._quantum = _QUANTUM_SHARE * self._basis / self._heaviest
        self.placements += 1
        if self._slow is not None:
            self._placed_at = self._ends
        heap: list[_Item] = []
        fallback = self._fallback()
        for key, entry in self._keys.items():
            if entry.eligible:
                entry.heaped = self._item(key, entry, entry.tag(fallback))
                heap.append(entry.heaped)
            else:
                entry.heaped = None
        heapq.heapify(heap)
        self._heap = heap

    def _item(self, key: str, entry: _Key, tag: float) -> _Item:
        return (tag // self._quantum, entry.running, entry.position, entry.last_grant, key, tag)

    def _fallback(self) -> float:
        return self._estimate if self._estimate is not None else _ESTIMATE_FLOOR

    def _entry(self, key: str) -> _Key:
        entry = self._keys.get(key)
        if entry is None:
            entry = self._idle.pop(key, None) or _Key(self._weight(key), self._cap(key))
            self._keys[key] = entry
        return entry

    def _join(self, entry: _Key, level: float | None = None) -> None:
        """A key gets due jobs again, or new limits: it joins no lower than ``level`` (default:
        ``_level()``)."""
        estimate = max(entry.estimate if entry.estimate is not None else self._fallback(), _ESTIMATE_FLOOR)
        floor = ((self._level() if level is None else level) * entry.weight) - entry.running * estimate
        entry.served = max(entry.served, floor)

    def _level(self) -> float:
        """Where a joining key's tag is set: the virtual time, or, if lower, what the first key in
        line (the heap's top), when uncapped, has been served, per weight, not counting what its
        running attempts are charged. Those charges are estimates, and each end corrects them all
        to the key's new one: after run times fell (a loaded host's load lifting) a flooding key's
        tag drops below the virtual time its grants set, end after end, and a newcomer placed at
        the virtual time waited dozens of grants while it did. Its finished service only grows, so
        the newcomer placed at it lies at or below the flood's tag until its first grant, and goes
        first, as a new flow starts at the start tag of the packet in service in start-time fair
        queueing. A capped key lags by design: level with it, a joining key would take that lag
        for credit, a share above its weight's over a run. O(1) amortised, as a pick."""
        self._drop_stale()
        if not self._heap:
            return self._virtual
        top = self._keys[self._heap[0][4]]
        if top.cap is not None:
            return self._virtual
        return min(self._virtual, top.served / top.weight)

    def _push(self, key: str, entry: _Key) -> None:
        """Place ``key`` in the heap at its tag now (its older entry, if any, goes stale)."""
        if entry.eligible:
            entry.heaped = self._item(key, entry, entry.tag(self._fallback()))
            heapq.heappush(self._heap, entry.heaped)
        else:
            entry.heaped = None

    def _refresh(self, key: str, entry: _Key) -> None:
        """An attempt of ``key`` ended: its tag moved by the gap between its run time and the
        estimate it was charged. A key that has no entry is placed; one whose tag fell more than a
        quantum below its entry's is placed again; otherwise its entry stays, and ``pick`` places it
        again when it comes up with a tag risen past its quantum. Each end thus costs no heap
        operation in the common case, and every key's order is off by at most two quanta, one
        charge (its long-run share is not: the tag itself is exact)."""
        heaped = entry.heaped
        if heaped is None or not entry.eligible:
            self._push(key, entry)
            return
        fallback = self._fallback()
        charge = max(entry.estimate if entry.estimate is not None else fallback, _ESTIMATE_FLOOR) / entry.weight
        current = entry.served / entry.weight + entry.running * charge
        if current // self._quantum < heaped[0] - 1:
            self._push(key, entry)

    def _settle(self, key: str, entry: _Key, *, lazy: bool = False) -> None:
        if entry.idle:
            del self._keys[key]
            entry.heaped = None
            entry.blocked = False
            self._idle[key] = entry
            self._idle.move_to_end(key)
            while len(self._idle) > self._memory:
                self._idle.popitem(last=False)
        elif lazy:
            self._refresh(key, entry)
        else:
            self._push(key, entry)

    def _drop_stale(self) -> None:
        heap, keys = self._heap, self._keys
        while heap:
            item = heap[0]
            entry = keys.get(item[4])
            if entry is not None and entry.heaped is item and entry.eligible:
                return
            heapq.heappop(heap)
            if entry is not None and entry.heaped is item:
                entry.heaped = None
