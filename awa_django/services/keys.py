"""Read models of the fairness keys inside the queues: which keys have the most backlog and the most
running, each key's settings in force, and its share in force (``water_fill``).

Two reads, both from the partial indexes on (queue, fair_key) of available and running rows, never
from the job rows' other columns: ``queue_keys`` (one queue, every active key: the admin's keys
page, bounded to ``KEYS_SHOWN`` per list when shown) and ``top_keys`` (every queue, the top N keys
by name and the rest as one ``other`` entry: ``awa_health --json`` and the metrics, whose series
count stays bounded however many keys there are).

**Share in force.** The queue's slots (what its live workers hold for it now, in flight plus free
permits; ``max_workers`` when no worker serves it) water-filled among the keys that have available
jobs, by weight, none above its cap or above what it could run now (its available plus running
jobs). It is the long-run split the claim path converges to while those keys stay backlogged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from awa_django.concurrency.waterfill import water_fill
from awa_django.defaults import KEY_WEIGHT_DEFAULT, MAX_WORKERS_DEFAULT
from awa_django.models import FairKey, JobState, Queue
from awa_django.services.cluster import capacities_by_queue, live_workers
from awa_django.services.db import database_alias
from awa_django.sql import statements

KEYS_SHOWN = 20
"""The admin's keys page lists at most this many keys by backlog and this many by running."""

OTHER_KEY = "other"
"""The ``key`` label of the sum of every key past the top N (metrics, ``awa_health --json``)."""


@dataclass(frozen=True)
class KeySettings:
    """A queue's key defaults and the keys whose FairKey row overrides them (NULL = the default)."""

    default_weight: int = KEY_WEIGHT_DEFAULT
    default_max_running: int | None = None
    overrides: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)

    def weight(self, key: str) -> int:
        weight = self.overrides.get(key, (None, None))[0]
        return self.default_weight if weight is None else weight

    def cap(self, key: str) -> int | None:
        if key in self.overrides and self.overrides[key][1] is not None:
            return self.overrides[key][1]
        return self.default_max_running


def key_settings(queue: str) -> KeySettings:
    """The Queue row's key defaults (weight 1, no cap without a row) and the queue's FairKey rows."""
    alias = database_alias()
    row = Queue.objects.using(alias).filter(name=queue).values_list("key_weight", "key_max_running").first()
    overrides = {
        key: (weight, cap)
        for key, weight, cap in FairKey.objects.using(alias)
        .filter(queue=queue)
        .values_list("key", "weight", "max_running")
    }
    if row is None:
        return KeySettings(overrides=overrides)
    return KeySettings(row[0], row[1], overrides)


@dataclass(frozen=True)
class KeyRow:
    """One key of a queue: its jobs now, its settings in force, and its share in force in slots
    (None: it has no available job, so it does not contend)."""

    key: str
    available: int
    running: int
    weight: int
    cap: int | None
    share: float | None


@dataclass(frozen=True)
class QueueKeys:
    """A queue's active keys: the top ``KEYS_SHOWN`` by backlog and by running, and the totals."""

    queue: str
    slots: int
    slots_source: str  # where ``slots`` comes from, said on the page
    by_backlog: list[KeyRow]
    by_running: list[KeyRow]
    active_keys: int  # keys with available or running jobs
    contending_keys: int  # keys with available jobs: the ones the share is computed over
    available: int
    running: int


def queue_slots(queue: str) -> tuple[int, str]:
    """The queue's slots now: what its live workers hold for it (in flight plus free permits), or
    its ``max_workers`` when no live worker serves it; and a phrase saying which."""
    capacities = capacities_by_queue(live_workers()).get(queue, [])
    if capacities:
        slots = sum(c.in_flight + c.available for c in capacities)
        return slots, f"held by {len(capacities)} live worker(s): in flight plus free permits"
    row = Queue.objects.using(database_alias()).filter(name=queue).values_list("max_workers", flat=True).first()
    return (MAX_WORKERS_DEFAULT if row is None else row), "no live worker serves it: its max_workers"


def shares_in_force(slots: float, counts: dict[str, tuple[int, int]], settings: KeySettings) -> dict[str, float]:
    """``water_fill`` of ``slots`` among the keys with available jobs (``counts``: key ->
    (available, running)), each capped by its cap and by what it could run now."""
    weights: dict[str, int] = {}
    caps: dict[str, float | None] = {}
    for key, (available, running) in counts.items():
        if available <= 0:
            continue
        weights[key] = settings.weight(key)
        cap = settings.cap(key)
        usable = available + running
        caps[key] = float(usable if cap is None else min(cap, usable))
    return water_fill(slots, weights, caps)


def _key_counts(queue: str) -> dict[str, tuple[int, int]]:
    """{key: (available, running)} for every key of ``queue`` with either (count_queue_keys.sql)."""
    counts: dict[str, list[int]] = {}
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["count_queue_keys"], {"queue": queue})
        for state, key, n in cursor.fetchall():
            counts.setdefault(key, [0, 0])[0 if state == JobState.AVAILABLE else 1] = int(n)
    return {key: (pair[0], pair[1]) for key, pair in counts.items()}


def queue_keys(queue: str, shown: int = KEYS_SHOWN) -> QueueKeys:
    """The queue's keys page: one GROUP BY over the two partial indexes, the settings, the slots."""
    counts = _key_counts(queue)
    settings = key_settings(queue)
    slots, source = queue_slots(queue)
    shares = shares_in_force(slots, counts, settings)

    def row(key: str) -> KeyRow:
        available, running = counts[key]
        return KeyRow(key, available, running, settings.weight(key), settings.cap(key), shares.get(key))

    def top(index: int) -> list[KeyRow]:
        keys = [key for key, pair in counts.items() if pair[index] > 0]
        keys.sort(key=lambda k: (-counts[k][index], k))
        return [row(key) for key in keys[:shown]]

    return QueueKeys(
        queue=queue,
        slots=slots,
        slots_source=source,
        by_backlog=top(0),
        by_running=top(1),
        active_keys=len(counts),
        contending_keys=len(shares),
        available=sum(a for a, _ in counts.values()),
        running=sum(r for _, r in counts.values()),
    )


@dataclass(frozen=True)
class TopKey:
    """One entry of ``top_keys``: a key by name, or ``OTHER_KEY`` for the sum of the ``keys`` past the top."""

    key: str
    jobs: int
    keys: int = 1
    other: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "jobs": self.jobs, "keys": self.keys, "other": self.other}


def top_keys(top: int, queues: Iterable[str] | None = None) -> dict[str, dict[str, list[TopKey]]]:
    """``{queue: {"available": [...], "running": [...]}}``: per queue and state, the ``top`` keys
    with the most jobs (most first), then at most one ``other`` entry summing the rest; one
    statement (count_top_keys.sql), at most ``top + 1`` rows per queue and state."""
    wanted = None if queues is None else set(queues)
    result: dict[str, dict[str, list[TopKey]]] = {}
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["count_top_keys"], {"top": top})
        for queue, state, key, n, keys in cursor.fetchall():
            if wanted is not None and queue not in wanted:
                continue
            entry = TopKey(OTHER_KEY, int(n), int(keys), True) if key is None else TopKey(key, int(n))
            result.setdefault(queue, {JobState.AVAILABLE: [], JobState.RUNNING: []})[state].append(entry)
    for per_state in result.values():
        for entries in per_state.values():
            entries.sort(key=lambda e: (e.other, -e.jobs, e.key))  # "other" last
    return result
