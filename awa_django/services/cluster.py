"""The live workers and their capacity, read from the snapshot rows they write
(``awa_django.snapshot``), and capacity scope "cluster" at a glance: what the dashboard,
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
from awa_django.defaults import MAX_WORKERS_DEFAULT
from awa_django.models import ClusterSettings, Queue, WorkerCapacity, WorkerInstance
from awa_django.services.db import database_alias
from awa_django.snapshot import QueueSnapshot, SnapshotFormatError, WorkerFlags

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


MODE_WORDS = {"hard_reserved": "hard-reserved", "weighted": "weighted"}


def mode_label(mode: str, scope: str) -> str:
    """A capacity mode as the pages say it, for all four pairs of mode and scope: the mode as configured
    (weighted when a global maximum is set; the snapshot's ``mode`` and the log's ``mode=``), with
    cluster scope said after it (``capacity_scope=cluster`` in the log and the snapshot's flags)."""
    word = MODE_WORDS.get(mode, mode)
    return f"{word}, cluster scope" if scope == "cluster" else word


def worker_scope(worker: WorkerInstance) -> str:
    """The worker's capacity scope from its snapshot flags ("process" when they cannot be read)."""
    try:
        return WorkerFlags.from_json(worker.flags).capacity_scope
    except SnapshotFormatError:
        return "process"


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
    max_workers: int | None = None  # in cluster scope: the cap the leader gave this worker
    min_workers: int | None = None
    weight: int | None = None
    overflow_held: int = 0
    in_flight: int = 0
    available: int = 0
    paused: bool = False
    scope: str = "process"
    # Cluster scope: what the caps of every worker add up to at most (the global maximum in force,
    # weighted; the queue's max_workers, hard-reserved). None: not known.
    cluster_limit: int | None = None

    @classmethod
    def from_snapshot(
        cls, worker: str, snapshot: QueueSnapshot, scope: str = "process", cluster_limit: int | None = None
    ) -> QueueCapacity:
        capacity = snapshot.capacity
        common: dict[str, Any] = {
            "worker": worker,
            "mode": snapshot.mode,
            "type": type(capacity).__name__,
            "in_flight": snapshot.in_flight,
            "available": snapshot.available,
            "paused": snapshot.paused,
            "scope": scope,
            "cluster_limit": cluster_limit,
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
        """The capacity as people read it: "weighted: min 0, weight 1, overflow held 0",
        "hard-reserved: max 50", or in cluster scope "cluster: cap 2 of 6"."""
        if self.scope == "cluster":
            of = f" of {self.cluster_limit}" if self.cluster_limit is not None else ""
            return f"cluster: cap {self.max_workers}{of}"
        if self.type == "Weighted":
            return f"weighted: min {self.min_workers}, weight {self.weight}, overflow held {self.overflow_held}"
        return f"hard-reserved: max {self.max_workers}"

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__ | {"describe": self.describe()}


def capacities_by_queue(workers: Sequence[WorkerInstance]) -> dict[str, list[QueueCapacity]]:
    """{queue: each live worker's capacity for it}, read from the snapshot rows with the schema
    the worker writes them in (``awa_django.snapshot``). An entry that does not follow it
    is left out and logged, naming the worker, the queue and what is wrong."""
    by_queue: dict[str, list[QueueCapacity]] = {}
    scopes = {worker.pk: worker_scope(worker) for worker in workers}
    limits = _ClusterLimits() if "cluster" in scopes.values() else None
    for worker in workers:
        entries = worker.queues if isinstance(worker.queues, dict) else {}
        scope = scopes[worker.pk]
        for queue, entry in entries.items():
            try:
                snapshot = QueueSnapshot.from_json(entry, f"worker {worker} queue {queue!r}")
            except SnapshotFormatError as exc:
                logger.warning(
                    "unreadable worker snapshot entry left out worker=%s queue=%s error=%s", worker, queue, exc
                )
                continue
            limit = limits.of(snapshot.mode, queue) if limits is not None and scope == "cluster" else None
            by_queue.setdefault(queue, []).append(QueueCapacity.from_snapshot(str(worker), snapshot, scope, limit))
    return by_queue


class _ClusterLimits:
    """What cluster-scope caps add up to at most, read once (two queries) when first asked."""

    def __init__(self) -> None:
        self._global: int | None = None
        self._queues: dict[str, int] | None = None

    def of(self, mode: str, queue: str) -> int | None:
        if self._queues is None:
            self._global = cluster_capacity()["in_force"]
            self._queues = dict(Queue.objects.using(database_alias()).values_list("name", "max_workers"))
        if mode == "weighted":
            return self._global
        return self._queues.get(queue, MAX_WORKERS_DEFAULT)


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


@dataclass(frozen=True)
class GlobalMaximum:
    """The global maximum as configured and as in force, and why they differ."""

    configured: int | None  # AWA['GLOBAL_MAX_WORKERS']
    in_force: list[int]  # what the live workers apply (several when they disagree); [] none known
    reason: str  # empty when in force is what is configured

    @property
    def differs(self) -> bool:
        return bool(self.reason)


def global_maximum(workers: Sequence[WorkerInstance]) -> GlobalMaximum:
    """The value in force beside the configured one, with the reason: in cluster scope the leader
    applies the smallest of the Cluster settings row and the workers' own settings; in process scope
    each worker applies its own (``--global-max-workers`` overrides the setting)."""
    configured = awa_settings().GLOBAL_MAX_WORKERS
    if any(worker_scope(w) == "cluster" for w in workers):
        cluster = cluster_capacity()
        in_force = cluster["in_force"]
        if in_force == configured:
            return GlobalMaximum(configured, [in_force], "")
        if cluster["disagree"]:
            reason = (
                f"the smallest of the Cluster settings row ({cluster['setting']}) and the cluster workers' own "
                f"settings ({', '.join(map(str, cluster['worker_settings']))})"
            )
        elif cluster["setting"] is not None:
            reason = f"the Cluster settings row sets {cluster['setting']}"
        else:
            reason = f"the cluster workers were started with {in_force}"
        if configured is None and in_force is not None:
            reason += ", so the cluster runs in weighted mode"
        return GlobalMaximum(configured, [] if in_force is None else [in_force], reason)
    values = sorted({w.global_max_workers for w in workers}, key=lambda v: -1 if v is None else v)
    applied = [int(v) for v in values if v is not None]
    if not workers or values == [configured]:
        return GlobalMaximum(configured, applied, "")
    shown = ", ".join("none (hard-reserved)" if v is None else str(v) for v in values)
    return GlobalMaximum(configured, applied, f"the live workers were started with {shown} (--global-max-workers)")


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
