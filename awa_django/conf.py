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
    # Server-side prepared statements (enqueue, and the worker's hot statements). None: on for a
    # direct connection, off when POOLER is "transaction"; True or False forces it (True behind a
    # pooler only if it keeps prepared statements: PgBouncer 1.21+ with max_prepared_statements).
    "PREPARED_STATEMENTS": None,
    # LISTEN for wake-ups; False: the worker polls every POLL_INTERVAL.
    "LISTEN": True,
    # What stands between the app and Postgres: None (a direct connection or a session pooler) or
    # "transaction" (PgBouncer in transaction mode, managed poolers): then no connection awa_django
    # opens keeps session state: no prepared statements, a lease row instead of an advisory lock
    # for the maintenance leader, and LISTEN only on LISTEN_DATABASE_URL (polling without it).
    "POOLER": None,
    # A libpq URL or conninfo string of a direct (or session-pooled) connection to the jobs'
    # database, used only for LISTEN; None: LISTEN on DATABASE_ALIAS (not behind a transaction pooler).
    "LISTEN_DATABASE_URL": None,
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
POOLER_MODES = (None, "transaction")


class AwaSettings:
    """Attribute access to AWA settings with defaults; unknown names are an AttributeError."""

    def _user(self) -> dict[str, Any]:
        return dict(getattr(settings, "AWA", None) or {})

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"unknown awa_django setting {name!r}; known: {', '.join(sorted(DEFAULTS))}")
        return self._user().get(name, DEFAULTS[name])

    @property
    def transaction_pooler(self) -> bool:
        """Whether the jobs' database is reached through a transaction-mode pooler."""
        return bool(self.POOLER == "transaction")

    @property
    def use_prepared_statements(self) -> bool:
        """PREPARED_STATEMENTS resolved: unset means on, except behind a transaction pooler."""
        value = self.PREPARED_STATEMENTS
        if value is None:
            return not self.transaction_pooler
        return bool(value)

    @property
    def listen_enabled(self) -> bool:
        """Whether the worker LISTENs: LISTEN is on and, behind a transaction pooler, there is a
        direct connection for it (LISTEN_DATABASE_URL)."""
        if not self.LISTEN:
            return False
        return not self.transaction_pooler or bool(self.LISTEN_DATABASE_URL)

    def unknown_keys(self) -> list[str]:
        return sorted(set(self._user()) - set(DEFAULTS))


awa_settings = AwaSettings()
