"""awa_django's settings: ``settings.AWA``, read at access time (so override_settings works)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Weighted mode when set: every queue's min_workers plus a shared overflow pool.
    "GLOBAL_MAX_WORKERS": None,
    # Where the capacity settings hold: "process" (each worker process on its own) or "cluster"
    # (every live worker together; the global maximum then comes from the ClusterSettings row).
    "CAPACITY_SCOPE": "process",
    # Seconds between polls when no NOTIFY arrives (LISTEN does the fast path).
    "POLL_INTERVAL": 1.0,
    # Seconds between heartbeats of in-flight jobs, and the age at which a heartbeat is stale.
    "HEARTBEAT_INTERVAL": 5.0,
    "HEARTBEAT_STALENESS": 30.0,
    # Seconds in-flight jobs get to finish after SIGTERM/SIGINT.
    "SHUTDOWN_TIMEOUT": 30.0,
    # How long finished jobs are kept before the maintenance leader deletes them.
    "COMPLETED_RETENTION": timedelta(days=1),
    "FAILED_RETENTION": timedelta(days=7),
    # The database alias the jobs live in (enqueue and worker).
    "DATABASE_ALIAS": "default",
    # Seconds awa_worker keeps retrying an unreachable database at startup before it exits
    # (--wait-for-database overrides; 0 = exit at once). Postgres and the worker often start together.
    "DATABASE_WAIT_TIMEOUT": 60.0,
    # Threads for plain `def` handlers.
    "SYNC_THREADS": 10,
    # Connections per worker process: this pool (claims, batched writes, heartbeats, snapshots)
    # plus one LISTEN connection and one maintenance-leader connection.
    "POOL_SIZE": 4,
    # Prepare the enqueue statement on the server; turn off behind a pooler that cannot keep
    # prepared statements (PgBouncer in transaction mode before 1.21).
    "PREPARED_STATEMENTS": True,
    # LISTEN for wake-ups; turn off behind a transaction-mode pooler (the worker then polls).
    "LISTEN": True,
    # Enqueue limits.
    "MAX_TAGS": 32,
    "MAX_TAG_LENGTH": 255,
    # Worker metrics: "none", "prometheus" (awa-django[metrics]), "otel" (awa-django[otel]) or a dotted
    # path to a MetricsSink subclass; --metrics overrides. METRICS_PORT (--metrics-port) serves the
    # Prometheus metrics of each worker process on that port (METRICS_ADDR: the address to bind).
    "METRICS": "none",
    "METRICS_PORT": None,
    "METRICS_ADDR": "0.0.0.0",  # noqa: S104 - scraped from another host, as prometheus-client binds
    # The depth view (awa_django.observability.views.metrics) answers only requests that send
    # "Authorization: Bearer <METRICS_TOKEN>" when set; unset, it is open to whoever reaches its URL.
    "METRICS_TOKEN": None,
    # Who runs jobs: "worker" (awa_worker processes) or "immediate" (each job runs in-process right
    # after its enqueue commits: development and tests without a worker; see awa_django.inline).
    "EXECUTION": "worker",
}

EXECUTION_MODES = ("worker", "immediate")


class AwaSettings:
    """Attribute access to AWA settings with defaults; unknown names are an AttributeError."""

    def _user(self) -> dict[str, Any]:
        return dict(getattr(settings, "AWA", None) or {})

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"unknown awa_django setting {name!r}; known: {', '.join(sorted(DEFAULTS))}")
        return self._user().get(name, DEFAULTS[name])

    def unknown_keys(self) -> list[str]:
        return sorted(set(self._user()) - set(DEFAULTS))


awa_settings = AwaSettings()
