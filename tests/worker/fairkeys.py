"""Helpers for the fair-key tests: keyed jobs written through the ORM, and what ran, from the rows.

What a key got is measured from the job rows alone: each attempt ran over [attempted_at,
finalized_at), so a key's slot-seconds over a window, its peak running at any instant, and where
its first job started among the others' are rebuilt from those intervals, never from the worker's
counters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from awa_django.concurrency.keys import KeyShares
from awa_django.models import Job, JobState


def add_jobs(
    queue: str,
    key: str,
    n: int,
    *,
    kind: str = "sleep",
    seconds: float = 0.02,
    priority: int = 2,
    args: dict[str, object] | None = None,
) -> list[int]:
    """``n`` available jobs of ``key``, due now, inserted in one statement (one NOTIFY); their
    args are ``{"seconds": seconds}`` unless given."""
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        Job(
            kind=kind,
            queue=queue,
            fair_key=key,
            args={"seconds": seconds} if args is None else args,
            state=JobState.AVAILABLE,
            priority=priority,
            run_at=now,
        )
        for _ in range(n)
    )
    return [job.pk for job in jobs]


def first_offers(allocator: KeyShares, wanted: str) -> list[datetime]:
    """Note when ``allocator`` is first offered key ``wanted`` (on the worker's thread): the list
    it returns holds that moment once it happened, as timezone.now(), to compare with attempted_at."""
    when: list[datetime] = []
    offer = allocator.offer

    def offer_and_note(key: str, count: int = 1, position: int | None = None) -> None:
        offer(key, count, position)
        if key == wanted and not when:
            when.append(timezone.now())

    allocator.offer = offer_and_note  # type: ignore[method-assign]
    return when


@dataclass(frozen=True)
class Ran:
    id: int
    key: str
    start: datetime
    end: datetime


def ran(queue: str) -> list[Ran]:
    """Every attempt of the queue that started, in start order (a running one ends now)."""
    now = timezone.now()
    rows = (
        Job.objects.filter(queue=queue, attempted_at__isnull=False)
        .order_by("attempted_at", "id")
        .values_list("id", "fair_key", "attempted_at", "finalized_at")
    )
    return [Ran(pk, key, start, end or now) for pk, key, start, end in rows if start is not None]


def peak_running(runs: Iterable[Ran]) -> dict[str, int]:
    """Per key, the most attempts running at one instant (an end at the same instant as a start
    comes first: the slot was free)."""
    events: list[tuple[datetime, int, str]] = []
    for r in runs:
        events += [(r.start, 1, r.key), (r.end, 0, r.key)]
    events.sort(key=lambda e: (e[0], e[1]))
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    total = 0
    for _, starts, key in events:
        step = 1 if starts else -1
        running[key] = running.get(key, 0) + step
        total += step
        peak[key] = max(peak.get(key, 0), running[key])
        peak["*"] = max(peak.get("*", 0), total)
    return peak


def slot_seconds(runs: Iterable[Ran], since: datetime, until: datetime) -> dict[str, float]:
    """Per key, the seconds its attempts held a slot inside [since, until)."""
    held: dict[str, float] = {}
    for r in runs:
        overlap = min(r.end, until) - max(r.start, since)
        if overlap > timedelta(0):
            held[r.key] = held.get(r.key, 0.0) + overlap.total_seconds()
    return held


def shares(runs: Iterable[Ran], since: datetime, until: datetime) -> dict[str, float]:
    held = slot_seconds(runs, since, until)
    total = sum(held.values())
    return {key: value / total for key, value in held.items()} if total else {}


def all_backlogged_until(runs: list[Ran], keys: Iterable[str]) -> datetime:
    """The last start of the first key to run out: up to then every key still had jobs waiting."""
    last = {key: max(r.start for r in runs if r.key == key) for key in keys}
    return min(last.values())
