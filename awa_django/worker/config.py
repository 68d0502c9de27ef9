"""The worker's configuration: settings, then command-line overrides, then ``Queue`` rows."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from awa_django import defaults
from awa_django.concurrency import validate_capacity
from awa_django.concurrency.share import HostShare
from awa_django.conf import CAPACITY_SCOPES, SECONDS_MAX, SECONDS_RULE, awa_settings
from awa_django.defaults import MAX_WORKERS_DEFAULT, MIN_WORKERS_DEFAULT, RATE_BURST_DEFAULT, WEIGHT_DEFAULT
from awa_django.exceptions import ConfigurationError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueConfig:
    """One queue's settings as the worker uses them (a ``Queue`` row, or the defaults)."""

    name: str
    max_workers: int = MAX_WORKERS_DEFAULT
    min_workers: int = MIN_WORKERS_DEFAULT
    weight: int = WEIGHT_DEFAULT
    rate_limit: float | None = None
    rate_burst: int = RATE_BURST_DEFAULT
    paused: bool = False
    deadline: float | None = None  # seconds
    priority_aging: float | None = None  # seconds

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueConfig:
        return cls(
            name=row["name"],
            max_workers=row["max_workers"],
            min_workers=row["min_workers"],
            weight=row["weight"],
            rate_limit=row["rate_limit"],
            rate_burst=row["rate_burst"],
            paused=row["paused"],
            deadline=_at_most_a_year(row["name"], "deadline", row["deadline_seconds"]),
            priority_aging=_at_most_a_year(row["name"], "priority_aging", row["priority_aging_seconds"]),
        )


_warned: set[tuple[str, str, float]] = set()


def _at_most_a_year(queue: str, name: str, seconds: float | None) -> float | None:
    """A queue's duration as the worker uses it: at most QUEUE_DURATION_MAX. The admin refuses a
    longer one; a row written some other way (the ORM, SQL) is capped, once logged, rather than
    leaving Postgres's timestamps in the claim or the aging round and stopping them."""
    if seconds is None or seconds <= defaults.QUEUE_DURATION_MAX:
        return seconds
    if (queue, name, seconds) not in _warned:
        _warned.add((queue, name, seconds))
        logger.warning(
            "queue %r: its %s of %s seconds is over a year; the worker uses a year. Set it to at most %d days "
            "in the Queue admin, or leave it empty for none",
            queue,
            name,
            seconds,
            defaults.QUEUE_DURATION_MAX // 86400,
        )
    return defaults.QUEUE_DURATION_MAX


def _seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{name} is {value!r}; it must be a number of seconds")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigurationError(f"{name} is {value!r}; it must be above 0")
    if value > SECONDS_MAX:
        raise ConfigurationError(f"{name} is {value!r} seconds; it must be {SECONDS_RULE}")
    return float(value)


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a ``Worker`` needs; built and validated before the event loop starts."""

    queues: dict[str, QueueConfig]
    global_max_workers: int | None = None
    poll_interval: float = defaults.POLL_INTERVAL_DEFAULT
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL_DEFAULT
    heartbeat_staleness: float = defaults.HEARTBEAT_STALENESS_DEFAULT
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT_DEFAULT
    completed_retention: float = defaults.COMPLETED_RETENTION_DEFAULT
    failed_retention: float = defaults.FAILED_RETENTION_DEFAULT
    maintenance_interval: float = 0.5
    reconfigure_interval: float = 1.0
    sync_threads: int = defaults.SYNC_THREADS_DEFAULT
    pool_size: int = defaults.POOL_SIZE_DEFAULT
    listen: bool = True
    database_alias: str = defaults.DATABASE_ALIAS_DEFAULT
    # "process": the capacity settings hold in this process; "cluster": for every live worker
    # together, through caps the maintenance leader publishes (see awa_django.concurrency.cluster).
    capacity_scope: str = "process"
    # Queues named on the command line: the worker then serves only those, and ignores new
    # Queue rows; otherwise a new Queue row gets a runner when it appears.
    fixed_queues: bool = False
    # awa_worker --processes N in capacity scope "process": this process's place on the host, and
    # the host's queue settings before the split (``queues`` and ``global_max_workers`` are this
    # process's part of them: awa_django.concurrency.share).
    host_share: HostShare | None = None
    host_queues: dict[str, QueueConfig] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.queues:
            raise ConfigurationError("no queues to serve; pass -q NAME, create a Queue, or register a @job")
        validate_capacity(self.global_max_workers, self.queues)
        for name in (
            "poll_interval",
            "heartbeat_interval",
            "heartbeat_staleness",
            "maintenance_interval",
            "reconfigure_interval",
        ):
            _seconds(name, getattr(self, name))
        _seconds("shutdown_timeout", self.shutdown_timeout)  # above 0, as AWA["SHUTDOWN_TIMEOUT"] (awa.E003)
        if self.capacity_scope not in CAPACITY_SCOPES:
            raise ConfigurationError(
                f"capacity_scope is {self.capacity_scope!r}; use one of {', '.join(map(repr, CAPACITY_SCOPES))}"
            )
        if self.heartbeat_staleness <= self.heartbeat_interval:
            raise ConfigurationError(
                f"heartbeat_staleness ({self.heartbeat_staleness}s) must exceed heartbeat_interval "
                f"({self.heartbeat_interval}s), or live jobs would be rescued; raise HEARTBEAT_STALENESS"
            )

    @property
    def mode(self) -> str:
        return "hard_reserved" if self.global_max_workers is None else "weighted"

    def with_queues(self, queues: dict[str, QueueConfig]) -> WorkerConfig:
        """The same worker with new queue settings: the host's, split when this is one of several
        processes (raises ConfigurationError when the split cannot be made)."""
        if self.host_share is None:
            return replace(self, queues=queues)
        return replace(self, queues=self.host_share.queues(queues), host_queues=queues)

    def host_settings(self) -> dict[str, QueueConfig]:
        """The queue settings as configured for the host (this process's own when it is alone)."""
        return self.queues if self.host_queues is None else self.host_queues


def build_config(
    *,
    queue_rows: Iterable[Mapping[str, Any]],
    handler_queues: Iterable[str],
    queues: Iterable[str] | None = None,
    process: tuple[int, int] | None = None,
    **overrides: Any,
) -> WorkerConfig:
    """Settings (``AWA``) give the defaults; ``overrides`` (the command line) win over them.

    ``queues``: the queues named on the command line; None means every ``Queue`` row plus every
    queue a registered handler names. ``process``: (index, count) of ``awa_worker --processes``;
    in capacity scope "process" this process then takes its part of the host's capacity.
    Raises ConfigurationError naming the bad value.
    """
    rows = {row["name"]: QueueConfig.from_row(row) for row in queue_rows}
    names = list(dict.fromkeys(queues)) if queues else sorted(set(rows) | set(handler_queues))
    current = awa_settings()
    values: dict[str, Any] = {
        "global_max_workers": current.GLOBAL_MAX_WORKERS,
        "poll_interval": current.POLL_INTERVAL,
        "heartbeat_interval": current.HEARTBEAT_INTERVAL,
        "heartbeat_staleness": current.HEARTBEAT_STALENESS,
        "shutdown_timeout": current.SHUTDOWN_TIMEOUT,
        "completed_retention": current.COMPLETED_RETENTION,
        "failed_retention": current.FAILED_RETENTION,
        "sync_threads": current.SYNC_THREADS,
        "pool_size": current.POOL_SIZE,
        "listen": current.listen_enabled,
        "database_alias": current.DATABASE_ALIAS,
        "capacity_scope": current.CAPACITY_SCOPE,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    for key in ("completed_retention", "failed_retention"):
        values[key] = _seconds(key, values[key])
    for key in ("sync_threads", "pool_size"):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{key} is {value!r}; it must be an integer of at least 1")
    served = {name: rows.get(name, QueueConfig(name)) for name in names}
    if process is not None and process[1] > 1 and values["capacity_scope"] == "process":
        share = HostShare(process[0], process[1], values["global_max_workers"])
        host = served
        served = share.queues(host)
        values = {**values, "global_max_workers": share.global_part, "host_share": share, "host_queues": host}
    return WorkerConfig(queues=served, fixed_queues=bool(queues), **values)
