"""The live workers and their capacity, read from the snapshot rows they write
(``awa_django.worker.snapshot``), and capacity scope "cluster" at a glance: what the dashboard,
the queue overview, the queue form and ``awa_health`` show about workers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from awa_django.concurrency import Weighted
from awa_django.conf import awa_settings
from awa_django.models import ClusterSettings, WorkerCapacity, WorkerInstance
from awa_django.services.db import database_alias
from awa_django.worker.snapshot import QueueSnapshot, SnapshotFormatError

logger = logging.getLogger(__name__)


def default_stale_after() -> float:
    """A worker whose snapshot is older than this many seconds is not live (``AwaSettings.worker_stale_after``)."""
    return awa_settings().worker_stale_after


def live_workers(stale_after: float | None = None, now: datetime | None = None) -> list[WorkerInstance]:
    """Worker snapshots written within ``stale_after`` seconds, newest first (one query)."""
    seconds = default_stale_after() if stale_after is None else stale_after
    cutoff = (now or timezone.now()) - timedelta(seconds=seconds)
    return list(
        WorkerInstance.objects.using(database_alias()).filter(last_seen_at__gte=cutoff).order_by("-last_seen_at")
    )


def worker_healthy(worker: WorkerInstance) -> bool:
    """Live (the caller filtered on last_seen_at) and not shutting down."""
    flags = worker.flags if isinstance(worker.flags, dict) else {}
    return not flags.get("stopping", False)


@dataclass
class QueueCapacity:
    """One live worker's capacity for one queue, from its snapshot row (the model
    ``WorkerCapacity`` is a different thing: a worker's row for capacity scope "cluster")."""

    worker: str
    mode: str
    type: str  # HardReserved | Weighted
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int | None = None
    overflow_held: int = 0
    in_flight: int = 0
    available: int = 0
    paused: bool = False

    @classmethod
    def from_snapshot(cls, worker: str, snapshot: QueueSnapshot) -> QueueCapacity:
        capacity = snapshot.capacity
        common: dict[str, Any] = {
            "worker": worker,
            "mode": snapshot.mode,
            "type": type(capacity).__name__,
            "in_flight": snapshot.in_flight,
            "available": snapshot.available,
            "paused": snapshot.paused,
        }
        if isinstance(capacity, Weighted):
            return cls(
                **common,
                min_workers=capacity.min_workers,
                weight=capacity.weight,
                overflow_held=capacity.overflow_held,
            )
        return cls(**common, max_workers=capacity.max_workers)

    def describe(self) -> str:
        if self.type == "Weighted":
            return f"Weighted(min {self.min_workers}, weight {self.weight}, overflow held {self.overflow_held})"
        return f"HardReserved(max {self.max_workers})"


def capacities_by_queue(workers: Sequence[WorkerInstance]) -> dict[str, list[QueueCapacity]]:
    """{queue: each live worker's capacity for it}, read from the snapshot rows with the schema
    the worker writes them in (``awa_django.worker.snapshot``). An entry that does not follow it
    is left out and logged, naming the worker, the queue and what is wrong."""
    by_queue: dict[str, list[QueueCapacity]] = {}
    for worker in workers:
        entries = worker.queues if isinstance(worker.queues, dict) else {}
        for queue, entry in entries.items():
            try:
                snapshot = QueueSnapshot.from_json(entry, f"worker {worker} queue {queue!r}")
            except SnapshotFormatError as exc:
                logger.warning(
                    "unreadable worker snapshot entry left out worker=%s queue=%s error=%s", worker, queue, exc
                )
                continue
            by_queue.setdefault(queue, []).append(QueueCapacity.from_snapshot(str(worker), snapshot))
    return by_queue


def global_maximums(workers: Sequence[WorkerInstance]) -> list[tuple[int, str]]:
    """The global maximums the Σ min_workers rule applies to: ``(value, where it comes from)``."""
    found: list[tuple[int, str]] = []
    configured = awa_settings().GLOBAL_MAX_WORKERS
    if isinstance(configured, int) and not isinstance(configured, bool) and configured >= 1:
        found.append((configured, "AWA['GLOBAL_MAX_WORKERS']"))
    for worker in workers:
        value = worker.global_max_workers
        if value is not None and all(value != v for v, _ in found):
            found.append((int(value), f"live worker {worker}"))
    return found


def cluster_capacity() -> dict[str, Any]:
    """Capacity scope "cluster" at a glance: how many workers take part, the Cluster settings row's
    global maximum, the workers' own settings, and the value the leader applies (the smallest of
    them, so workers that disagree never together exceed any). Reads only; no locks."""
    row = ClusterSettings.objects.filter(pk=1).values_list("global_max_workers", flat=True).first()
    own = sorted({v for v in WorkerCapacity.objects.values_list("global_max_workers", flat=True) if v is not None})
    values = set(own) | ({row} if row is not None else set())
    return {
        "workers": WorkerCapacity.objects.count(),
        "setting": row,
        "worker_settings": own,
        "in_force": min(values) if values else None,
        "disagree": len(values) > 1,
    }
