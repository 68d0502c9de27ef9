"""The worker snapshot's one schema: what a worker writes into its ``WorkerInstance`` row, and
what the admin, ``awa_health`` and the enqueue warnings read back.

``WorkerInstance.queues`` holds ``{queue: QueueSnapshot.to_json()}``:

    {"mode": "weighted" | "hard_reserved",
     "capacity": {"type": "Weighted", "min_workers": 2, "weight": 3, "overflow_held": 0}
               | {"type": "HardReserved", "max_workers": 50},
     "in_flight": 0, "available": 9, "paused": false, "jobs_available": 4 | null}

``mode`` is the mode as configured (weighted when a global maximum is set), in either scope; in
capacity scope "cluster" (``WorkerFlags.capacity_scope``) the capacity is ``HardReserved`` with the
cap the leader gave this worker as ``max_workers``, whichever the mode.

``WorkerInstance.flags`` holds ``WorkerFlags.to_json()``. Both are written by the snapshot loop
(``awa_django.worker.health``) and read with ``from_json`` only, never by looking keys up at the
call site. ``from_json`` ignores keys it does not know (a newer or older worker may write more)
and raises ``SnapshotFormatError``, naming the key, the value and what was expected, for a value
it cannot read. Pure: no I/O, nothing here imports the runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from awa_django.concurrency import Capacity, HardReserved, Weighted

CAPACITY_TYPES: dict[str, type[HardReserved] | type[Weighted]] = {"HardReserved": HardReserved, "Weighted": Weighted}


class SnapshotFormatError(ValueError):
    """A snapshot value that does not follow the schema above."""


def _int(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotFormatError(f"{where}: {key!r} must be an integer, got {value!r}")
    return value


def _optional_int(data: Mapping[str, Any], key: str, where: str) -> int | None:
    return None if data.get(key) is None else _int(data, key, where)


def _optional_seconds(data: Mapping[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise SnapshotFormatError(f"{where}: {key!r} must be a positive number of seconds, got {value!r}")
    return float(value)


def _bool(data: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise SnapshotFormatError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value


def _names(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise SnapshotFormatError(f"{where}: {key!r} must be a list of queue names, got {value!r}")
    return tuple(value)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SnapshotFormatError(f"{where} must be a JSON object, got {value!r}")
    return value


def capacity_to_json(capacity: Capacity) -> dict[str, Any]:
    return {"type": type(capacity).__name__, **asdict(capacity)}


def capacity_from_json(data: object, where: str = "capacity") -> Capacity:
    entry = _mapping(data, where)
    kind = entry.get("type")
    if kind == "HardReserved":
        return HardReserved(max_workers=_int(entry, "max_workers", where))
    if kind == "Weighted":
        return Weighted(
            min_workers=_int(entry, "min_workers", where),
            weight=_int(entry, "weight", where),
            overflow_held=_int(entry, "overflow_held", where),
        )
    raise SnapshotFormatError(f"{where}: 'type' must be one of {sorted(CAPACITY_TYPES)}, got {kind!r}")


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One queue's capacity in one worker, as its allocator saw it when the snapshot was written."""

    mode: str  # the configured mode: "hard_reserved" or "weighted"
    capacity: Capacity
    in_flight: int  # permits held: jobs running or being written
    available: int  # permits a claim would get now
    paused: bool = False
    jobs_available: int | None = None  # available rows counted in the database; None: not counted

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "capacity": capacity_to_json(self.capacity),
            "in_flight": self.in_flight,
            "available": self.available,
            "paused": self.paused,
            "jobs_available": self.jobs_available,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "queue snapshot") -> QueueSnapshot:
        entry = _mapping(data, where)
        mode = entry.get("mode")
        if mode not in ("hard_reserved", "weighted"):
            raise SnapshotFormatError(f"{where}: 'mode' must be 'hard_reserved' or 'weighted', got {mode!r}")
        return cls(
            mode=mode,
            capacity=capacity_from_json(entry.get("capacity"), f"{where} capacity"),
            in_flight=_int(entry, "in_flight", where),
            available=_int(entry, "available", where),
            paused=_bool(entry, "paused", where),
            jobs_available=_optional_int(entry, "jobs_available", where),
        )


@dataclass(frozen=True, slots=True)
class WorkerFlags:
    """The worker's state beside its queues."""

    listening: bool  # the LISTEN connection answers its health check
    leader: bool  # this worker is the maintenance leader
    stopping: bool
    in_flight: int  # attempts running or being written
    sync_running: int  # sync handlers running in the thread pool
    capacity_scope: str  # "process" or "cluster"
    sync_overrunning: int = 0  # sync handlers past their deadline whose threads still run, each holding its slot
    cluster_caps: dict[str, int] | None = field(default=None)  # scope "cluster" only: the leader's caps
    cluster_leased: bool | None = None  # scope "cluster" only: those caps are within their lease
    draining: bool = False  # an operator asked it to drain and stop (a WorkerRequest), and it is
    held_queues: tuple[str, ...] = ()  # queues an operator asked it to stop claiming, sorted
    # Its own --heartbeat-staleness: the leader's rescue leaves this worker's running jobs alone
    # that long after their last heartbeat, even when the leader's own staleness is shorter.
    heartbeat_staleness: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "listening": self.listening,
            "leader": self.leader,
            "stopping": self.stopping,
            "in_flight": self.in_flight,
            "sync_running": self.sync_running,
            "capacity_scope": self.capacity_scope,
            "sync_overrunning": self.sync_overrunning,
            "draining": self.draining,
            "held_queues": list(self.held_queues),
        }
        if self.heartbeat_staleness is not None:
            data["heartbeat_staleness"] = self.heartbeat_staleness
        if self.cluster_caps is not None:
            data["cluster_caps"] = dict(self.cluster_caps)
            data["cluster_leased"] = bool(self.cluster_leased)
        return data

    @classmethod
    def from_json(cls, data: object, where: str = "worker flags") -> WorkerFlags:
        entry = _mapping(data, where)
        scope = entry.get("capacity_scope")
        if scope not in ("process", "cluster"):
            raise SnapshotFormatError(f"{where}: 'capacity_scope' must be 'process' or 'cluster', got {scope!r}")
        caps = entry.get("cluster_caps")
        cluster_caps = None
        if caps is not None:
            caps = _mapping(caps, f"{where} cluster_caps")
            cluster_caps = {str(queue): _int(caps, queue, f"{where} cluster_caps") for queue in caps}
        return cls(
            listening=_bool(entry, "listening", where),
            leader=_bool(entry, "leader", where),
            stopping=_bool(entry, "stopping", where),
            in_flight=_int(entry, "in_flight", where),
            sync_running=_int(entry, "sync_running", where),
            capacity_scope=scope,
            sync_overrunning=_int(entry, "sync_overrunning", where) if "sync_overrunning" in entry else 0,
            cluster_caps=cluster_caps,
            cluster_leased=_bool(entry, "cluster_leased", where) if cluster_caps is not None else None,
            draining=_bool(entry, "draining", where),
            held_queues=_names(entry, "held_queues", where),
            heartbeat_staleness=_optional_seconds(entry, "heartbeat_staleness", where),
        )


def queues_to_json(queues: Mapping[str, QueueSnapshot]) -> dict[str, Any]:
    return {name: entry.to_json() for name, entry in queues.items()}


def queues_from_json(data: object, where: str = "worker snapshot") -> dict[str, QueueSnapshot]:
    """Every queue of a ``WorkerInstance.queues`` value; raises on the first unreadable entry."""
    entries = _mapping(data, f"{where} queues")
    return {str(name): QueueSnapshot.from_json(entry, f"{where} queue {name!r}") for name, entry in entries.items()}
