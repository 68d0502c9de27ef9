"""awa_django's settings: ``settings.AWA`` as one typed, validated, immutable object.

``awa_settings()`` returns an ``AwaSettings`` built from ``settings.AWA`` the first time it is
asked for, and again after ``settings.AWA`` changes (Django's ``setting_changed`` signal, sent by
``override_settings`` and pytest-django's ``settings`` fixture), never at import.

Every rule for a value lives here, once: ``find_problems`` checks a mapping and says what is wrong
with each key (the system check ids awa.E0xx, with the message and the hint the checks show);
building the object runs it, and ``awa_settings()`` raises ``InvalidSettingsError`` (an
``ImproperlyConfigured``) naming every bad value, so no caller ever sees a value of the wrong
type. The system checks (``awa_django.checks``) report the same problems without raising.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Literal, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from awa_django import defaults

EXECUTION_MODES = ("worker", "immediate")
POOLER_MODES = (None, "transaction")
CAPACITY_SCOPES = ("process", "cluster")
PORT_MAX = 65535

CapacityScope = Literal["process", "cluster"]
Execution = Literal["worker", "immediate"]


@dataclass(frozen=True)
class AwaSettings:
    """``settings.AWA`` with its defaults, every value checked and of its declared type.

    Names and meanings are the ``AWA`` keys' (the README's settings table documents them).
    """

    # Weighted mode when set: every queue's min_workers plus a shared overflow pool.
    GLOBAL_MAX_WORKERS: int | None = None
    # Where the capacity settings hold: "process" (each worker process on its own) or "cluster"
    # (every live worker together; the global maximum then comes from the ClusterSettings row).
    CAPACITY_SCOPE: CapacityScope = "process"
    # Seconds between polls when no NOTIFY arrives (LISTEN does the fast path).
    POLL_INTERVAL: float = defaults.POLL_INTERVAL_DEFAULT
    # Seconds between heartbeats of in-flight jobs, and the age at which a heartbeat is stale.
    HEARTBEAT_INTERVAL: float = defaults.HEARTBEAT_INTERVAL_DEFAULT
    HEARTBEAT_STALENESS: float = defaults.HEARTBEAT_STALENESS_DEFAULT
    # Seconds in-flight jobs get to finish after SIGTERM/SIGINT.
    SHUTDOWN_TIMEOUT: float = defaults.SHUTDOWN_TIMEOUT_DEFAULT
    # How long finished jobs are kept before the maintenance leader deletes them (a number of
    # seconds in settings.AWA is read as that many seconds).
    COMPLETED_RETENTION: timedelta = timedelta(seconds=defaults.COMPLETED_RETENTION_DEFAULT)
    FAILED_RETENTION: timedelta = timedelta(seconds=defaults.FAILED_RETENTION_DEFAULT)
    # The database alias the jobs live in (enqueue and worker).
    DATABASE_ALIAS: str = defaults.DATABASE_ALIAS_DEFAULT
    # Seconds awa_worker keeps retrying an unreachable database at startup before it exits
    # (--wait-for-database overrides; 0 = exit at once). Postgres and the worker often start together.
    DATABASE_WAIT_TIMEOUT: float = 60.0
    # Threads for plain `def` handlers.
    SYNC_THREADS: int = defaults.SYNC_THREADS_DEFAULT
    # Connections per worker process: this pool (claims, batched writes, heartbeats, snapshots)
    # plus one LISTEN connection and one maintenance-leader connection.
    POOL_SIZE: int = defaults.POOL_SIZE_DEFAULT
    # Server-side prepared statements (enqueue, and the worker's hot statements). None: on for a
    # direct connection, off when POOLER is "transaction"; True or False forces it (True behind a
    # pooler only if it keeps prepared statements: PgBouncer 1.21+ with max_prepared_statements).
    PREPARED_STATEMENTS: bool | None = None
    # LISTEN for wake-ups; False: the worker polls every POLL_INTERVAL.
    LISTEN: bool = True
    # What stands between the app and Postgres: None (a direct connection or a session pooler) or
    # "transaction" (PgBouncer in transaction mode, managed poolers): then no connection awa_django
    # opens keeps session state: no prepared statements, a lease row instead of an advisory lock
    # for the maintenance leader, and LISTEN only on LISTEN_DATABASE_URL (polling without it).
    POOLER: Literal["transaction"] | None = None
    # A libpq URL or conninfo string of a direct (or session-pooled) connection to the jobs'
    # database, used only for LISTEN; None: LISTEN on DATABASE_ALIAS (not behind a transaction pooler).
    LISTEN_DATABASE_URL: str | None = None
    # Enqueue limits.
    MAX_TAGS: int = defaults.MAX_TAGS_DEFAULT
    MAX_TAG_LENGTH: int = defaults.NAME_MAX_LENGTH
    # Worker metrics: "none", "prometheus" (awa-django[metrics]), "otel" (awa-django[otel]) or a dotted
    # path to a MetricsSink subclass; --metrics overrides. METRICS_PORT (--metrics-port) serves the
    # Prometheus metrics of each worker process on that port (METRICS_ADDR: the address to bind).
    METRICS: str = "none"
    METRICS_PORT: int | None = None
    METRICS_ADDR: str = "0.0.0.0"  # noqa: S104 - scraped from another host, as prometheus-client binds
    # The depth view (awa_django.observability.views.metrics) answers only requests that send
    # "Authorization: Bearer <METRICS_TOKEN>" when set; unset, it is open to whoever reaches its URL.
    METRICS_TOKEN: str | None = None
    # Who runs jobs: "worker" (awa_worker processes) or "immediate" (each job runs in-process right
    # after its enqueue commits: development and tests without a worker; see awa_django.inline).
    EXECUTION: Execution = "worker"

    @property
    def transaction_pooler(self) -> bool:
        """Whether the jobs' database is reached through a transaction-mode pooler."""
        return self.POOLER == "transaction"

    @property
    def use_prepared_statements(self) -> bool:
        """PREPARED_STATEMENTS resolved: unset means on, except behind a transaction pooler."""
        if self.PREPARED_STATEMENTS is None:
            return not self.transaction_pooler
        return self.PREPARED_STATEMENTS

    @property
    def snapshot_interval(self) -> float:
        """Seconds between a worker's snapshot writes (the runtime writes every min(heartbeat, 5s))."""
        return min(self.HEARTBEAT_INTERVAL, defaults.SNAPSHOT_INTERVAL_MAX)

    @property
    def worker_stale_after(self) -> float:
        """A worker whose snapshot is older than this many seconds is not live: three missed writes."""
        return defaults.SNAPSHOTS_MISSED_BEFORE_STALE * self.snapshot_interval

    @property
    def listen_enabled(self) -> bool:
        """Whether the worker LISTENs: LISTEN is on and, behind a transaction pooler, there is a
        direct connection for it (LISTEN_DATABASE_URL)."""
        if not self.LISTEN:
            return False
        return not self.transaction_pooler or bool(self.LISTEN_DATABASE_URL)


DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(AwaSettings)}
"""Every AWA key and its default (the checks' hints quote them)."""


@dataclass(frozen=True)
class SettingProblem:
    """What is wrong with one AWA key: the check id, its message and hint, and ``error``, the text
    an ``InvalidSettingsError`` shows for it (the message and the hint unless a rule says more)."""

    key: str
    value: object
    id: str
    message: str
    hint: str
    error: str = ""

    def __str__(self) -> str:
        return self.error or f"{self.message} ({self.hint}) [{self.id}]"


class InvalidSettingsError(ImproperlyConfigured):
    """``settings.AWA`` holds a value awa_django cannot use; ``problems`` says which and why."""

    def __init__(self, problems: list[SettingProblem]) -> None:
        self.problems = problems
        text = str(problems[0]) if len(problems) == 1 else "; ".join(map(str, problems))
        super().__init__(text)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seconds_above_zero(key: str, value: object) -> SettingProblem | None:
    if _is_number(value) and cast(float, value) > 0:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E003",
        f"AWA[{key!r}] is {value!r}; it must be a number of seconds above 0",
        f"set AWA[{key!r}] to e.g. {DEFAULTS[key]!r}, or remove it for the default",
    )


def _count(key: str, value: object) -> SettingProblem | None:
    if _is_int(value) and cast(int, value) >= 1:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E006",
        f"AWA[{key!r}] is {value!r}; it must be an integer of at least 1",
        f"set AWA[{key!r}] to e.g. {DEFAULTS[key]!r}, or remove it for the default",
    )


def _retention(key: str, value: object) -> SettingProblem | None:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if _is_number(seconds) and cast(float, seconds) > 0:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E007",
        f"AWA[{key!r}] is {value!r}; it must be a timedelta or a number of seconds above 0",
        f"set AWA[{key!r}] to e.g. timedelta(days=1), or remove it for the default",
    )


def _global_max_workers(key: str, value: object) -> SettingProblem | None:
    if value is None or (_is_int(value) and cast(int, value) >= 1):
        return None
    return SettingProblem(
        key,
        value,
        "awa.E004",
        f"AWA['GLOBAL_MAX_WORKERS'] is {value!r}; it must be an integer of at least 1, or None",
        "set it to the number of jobs one worker may run at once, or None for hard-reserved mode",
    )


def _capacity_scope(key: str, value: object) -> SettingProblem | None:
    if value in CAPACITY_SCOPES:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E010",
        f"AWA['CAPACITY_SCOPE'] is {value!r}; it must be 'process' or 'cluster'",
        "'process' (the default): each worker process applies the capacity settings on its own; "
        "'cluster': they hold for every live worker together",
    )


def _pooler(key: str, value: object) -> SettingProblem | None:
    if value in POOLER_MODES:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E012",
        f"AWA['POOLER'] is {value!r}; it must be None or 'transaction'",
        "None (the default): a direct connection or a session pooler; 'transaction': PgBouncer in "
        "transaction mode or a managed pooler that hands each transaction any server session",
    )


def _listen_database_url(key: str, value: object) -> SettingProblem | None:
    if value is None:
        return None
    problem = _conninfo_problem(value)
    if problem is None:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E013",
        f"AWA['LISTEN_DATABASE_URL'] is not a PostgreSQL connection string: {problem}",
        "use a URL such as 'postgresql://user:password@db-host:5432/dbname' (a direct connection, "
        "not the pooler), or None to LISTEN on AWA['DATABASE_ALIAS']",
    )


def _conninfo_problem(url: object) -> str | None:
    if not isinstance(url, str) or not url.strip():
        return f"{url!r} is not a non-empty string"
    from psycopg import conninfo

    try:
        conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg raises ProgrammingError, libpq's message says what is wrong
        return f"{exc}".strip()
    return None


def _prepared_statements(key: str, value: object) -> SettingProblem | None:
    if value is None or isinstance(value, bool):
        return None
    return SettingProblem(
        key,
        value,
        "awa.E014",
        f"AWA['PREPARED_STATEMENTS'] is {value!r}; it must be True, False or None",
        "None (the default): on, except behind a transaction pooler (AWA['POOLER'] = 'transaction')",
    )


def _execution(key: str, value: object) -> SettingProblem | None:
    if value in EXECUTION_MODES:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E008",
        f"AWA['EXECUTION'] is {value!r}; it must be one of {', '.join(map(repr, EXECUTION_MODES))}",
        "use 'worker' (the default: awa_worker runs the jobs), or 'immediate' in development "
        "to run each job in-process right after its enqueue commits",
        error=f"AWA['EXECUTION'] is {value!r}; use 'worker' (the default: awa_worker runs the jobs) or "
        "'immediate' (development and tests: each job runs in-process right after its enqueue commits)",
    )


def _database_alias(key: str, value: object) -> SettingProblem | None:
    if isinstance(value, str) and value:
        return None
    aliases = sorted(getattr(settings, "DATABASES", {}))
    return SettingProblem(
        key,
        value,
        "awa.E002",
        f"AWA['DATABASE_ALIAS'] is {value!r}, which is not in DATABASES",
        f"use one of {aliases}",
    )


# The rules below were checked only where the value is used (the awa_worker command, the metrics
# view) before they moved here; the system check reports them as awa.E015, with the same text.


def _database_wait_timeout(key: str, value: object) -> SettingProblem | None:
    if _is_number(value) and math.isfinite(cast(float, value)) and cast(float, value) >= 0:
        return None
    message = (
        f"AWA['DATABASE_WAIT_TIMEOUT'] is {value!r}; it must be a number of seconds, 0 or more "
        "(0 = do not wait): fix the setting, or pass --wait-for-database SECONDS"
    )
    return SettingProblem(key, value, "awa.E015", message, "remove it for the default (60 seconds)", error=message)


def _metrics_port(key: str, value: object) -> SettingProblem | None:
    if value is None or (_is_int(value) and 1 <= cast(int, value) <= PORT_MAX):
        return None
    message = f"AWA['METRICS_PORT'] is {value!r}; use a port number from 1 to {PORT_MAX}, or None"
    return SettingProblem(key, value, "awa.E015", message, "or pass --metrics-port PORT", error=message)


def _text(*, optional: bool, empty_ok: bool = True) -> Callable[[str, object], SettingProblem | None]:
    def rule(key: str, value: object) -> SettingProblem | None:
        if (optional and value is None) or (isinstance(value, str) and (empty_ok or value)):
            return None
        wanted = "a string" + (" or None" if optional else "")
        message = f"AWA[{key!r}] is {value!r}; it must be {wanted}"
        return SettingProblem(key, value, "awa.E015", message, f"set it to e.g. {DEFAULTS[key]!r}, or remove it")

    return rule


def _flag(key: str, value: object) -> SettingProblem | None:
    if isinstance(value, bool):
        return None
    message = f"AWA[{key!r}] is {value!r}; it must be True or False"
    return SettingProblem(key, value, "awa.E015", message, f"remove it for the default ({DEFAULTS[key]!r})")


def _metrics(key: str, value: object) -> SettingProblem | None:
    if value is None or (isinstance(value, str) and value):
        return None  # None reads as "none"; load_sink says what is wrong with an unknown name
    message = f"AWA['METRICS'] is {value!r}; it must be 'none', 'prometheus', 'otel' or a dotted path"
    return SettingProblem(key, value, "awa.E015", message, "remove it for the default ('none')")


_RULES: dict[str, Callable[[str, object], SettingProblem | None]] = {
    # In the order the checks have always reported them.
    "POLL_INTERVAL": _seconds_above_zero,
    "HEARTBEAT_INTERVAL": _seconds_above_zero,
    "HEARTBEAT_STALENESS": _seconds_above_zero,
    "SHUTDOWN_TIMEOUT": _seconds_above_zero,
    "GLOBAL_MAX_WORKERS": _global_max_workers,
    "SYNC_THREADS": _count,
    "POOL_SIZE": _count,
    "MAX_TAGS": _count,
    "MAX_TAG_LENGTH": _count,
    "COMPLETED_RETENTION": _retention,
    "FAILED_RETENTION": _retention,
    "CAPACITY_SCOPE": _capacity_scope,
    "POOLER": _pooler,
    "LISTEN_DATABASE_URL": _listen_database_url,
    "PREPARED_STATEMENTS": _prepared_statements,
    "EXECUTION": _execution,
    "DATABASE_ALIAS": _database_alias,
    "DATABASE_WAIT_TIMEOUT": _database_wait_timeout,
    "LISTEN": _flag,
    "METRICS": _metrics,
    "METRICS_PORT": _metrics_port,
    "METRICS_ADDR": _text(optional=False, empty_ok=False),
    "METRICS_TOKEN": _text(optional=True),
}


def user_settings() -> dict[str, Any]:
    """``settings.AWA`` as the project wrote it (an unset or empty AWA is ``{}``)."""
    return dict(getattr(settings, "AWA", None) or {})


def unknown_keys(user: Mapping[str, Any] | None = None) -> list[str]:
    """The keys of ``settings.AWA`` (or ``user``) that are not awa_django settings, sorted."""
    return sorted(set(user_settings() if user is None else user) - set(DEFAULTS))


def find_problems(user: Mapping[str, Any]) -> list[SettingProblem]:
    """Every problem with the known keys of ``user`` (the unknown ones are ``unknown_keys``)."""
    problems = []
    for key, rule in _RULES.items():
        if key in user:
            problem = rule(key, user[key])
            if problem is not None:
                problems.append(problem)
    return problems


_SECONDS = ("POLL_INTERVAL", "HEARTBEAT_INTERVAL", "HEARTBEAT_STALENESS", "SHUTDOWN_TIMEOUT", "DATABASE_WAIT_TIMEOUT")


def build(user: Mapping[str, Any]) -> tuple[AwaSettings, list[SettingProblem]]:
    """``user`` as ``AwaSettings`` plus the problems found; a key with a problem keeps its default,
    so the object is always usable (the checks rely on that) and always of its declared types."""
    problems = find_problems(user)
    bad = {problem.key for problem in problems}
    values = {key: value for key, value in user.items() if key in DEFAULTS and key not in bad}
    for key in (
        "POLL_INTERVAL",
        "HEARTBEAT_INTERVAL",
        "HEARTBEAT_STALENESS",
        "SHUTDOWN_TIMEOUT",
        "DATABASE_WAIT_TIMEOUT",
    ):
        if key in values:
            values[key] = float(values[key])
    for key in ("COMPLETED_RETENTION", "FAILED_RETENTION"):
        if key in values and not isinstance(values[key], timedelta):
            values[key] = timedelta(seconds=values[key])
    if values.get("METRICS", "none") is None:
        values["METRICS"] = "none"
    return AwaSettings(**values), problems


_current: AwaSettings | None = None


def awa_settings() -> AwaSettings:
    """The current settings, built once per value of ``settings.AWA``.

    Raises InvalidSettingsError naming every bad value (``manage.py check`` lists them with ids
    and hints); unknown keys are only a warning (awa.W001).
    """
    global _current
    current = _current
    if current is None:
        current, problems = build(user_settings())
        if problems:
            raise InvalidSettingsError(problems)
        _current = current
    return current


def _reset(*, setting: str, **kwargs: Any) -> None:
    global _current
    if setting in ("AWA", "DATABASES"):  # DATABASES: the E002 hint lists the aliases
        _current = None


setting_changed.connect(_reset, dispatch_uid="awa_django.conf.reset")
