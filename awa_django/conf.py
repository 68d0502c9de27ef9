"""awa_django's settings: ``settings.AWA`` as one typed, validated, immutable object.

``awa_settings()`` returns an ``AwaSettings`` built from ``settings.AWA`` the first time it is
asked for, and again after ``settings.AWA`` changes (Django's ``setting_changed`` signal, sent by
``override_settings`` and pytest-django's ``settings`` fixture), never at import.

Each key is declared once, as a ``setting(...)`` field of ``AwaSettings``: its type, its default
(from ``awa_django.defaults`` where the package shares it), its rule, its coercion and its meaning.
``find_problems`` checks a mapping and says what is wrong
with each key (the system check ids awa.E0xx, with the message and the hint the checks show);
building the object runs it, and ``awa_settings()`` raises ``InvalidSettingsError`` (an
``ImproperlyConfigured``) naming every bad value, so no caller ever sees a value of the wrong
type. The system checks (``awa_django.checks``) report the same problems without raising.
"""

from __future__ import annotations

import importlib.util
import json
import math
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from datetime import timedelta
from typing import Any, Literal, TypeVar, cast

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
T = TypeVar("T")


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


# The longest duration any setting or option takes: a century. Longer ones leave what Python's
# timedelta or Postgres's timestamps hold once added to now() (a staleness of 1e12 s failed every
# rescue round, 1e15 s stopped the worker with an OverflowError naming no setting).
SECONDS_MAX = 100 * 365.25 * 24 * 3600  # 3,155,760,000
SECONDS_RULE = f"at most {SECONDS_MAX:.0f} (100 years)"


def is_seconds(value: object, *, zero_ok: bool = False) -> bool:
    """A finite number of seconds above 0 (or 0 or more, with ``zero_ok``), at most SECONDS_MAX; a
    bool is not a number.

    The one rule for a duration, wherever one is read: the settings here, the commands' arguments
    (``awa_django.management.arguments``), the worker's configuration.
    """
    if not _is_number(value) or not math.isfinite(cast(float, value)) or cast(float, value) > SECONDS_MAX:
        return False
    return cast(float, value) >= 0 if zero_ok else cast(float, value) > 0


def _seconds_above_zero(key: str, value: object) -> SettingProblem | None:
    if is_seconds(value):
        return None
    return SettingProblem(
        key,
        value,
        "awa.E003",
        f"AWA[{key!r}] is {value!r}; it must be a number of seconds above 0, {SECONDS_RULE}",
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


def _tag_length(key: str, value: object) -> SettingProblem | None:
    """A count, at most the tags column's width (varchar(NAME_MAX_LENGTH)[]): a longer tag would pass
    the enqueue's check and fail in Postgres, aborting the caller's transaction."""
    if _is_int(value) and 1 <= cast(int, value) <= defaults.NAME_MAX_LENGTH:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E006",
        f"AWA[{key!r}] is {value!r}; it must be an integer from 1 to {defaults.NAME_MAX_LENGTH} "
        f"(the tags column holds tags of at most {defaults.NAME_MAX_LENGTH} characters)",
        f"set AWA[{key!r}] to at most {defaults.NAME_MAX_LENGTH}, or remove it for the default",
    )


def _retention(key: str, value: object) -> SettingProblem | None:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if is_seconds(seconds) and cast(float, seconds) >= 1:  # under a second reads as 0 once a timedelta
        return None
    return SettingProblem(
        key,
        value,
        "awa.E007",
        f"AWA[{key!r}] is {value!r}; it must be a timedelta or a number of seconds, at least 1 and {SECONDS_RULE}",
        f"set AWA[{key!r}] to e.g. timedelta(days=1), or remove it for the default",
    )


def _global_max_workers(key: str, value: object) -> SettingProblem | None:
    if value is None or (_is_int(value) and 1 <= cast(int, value) <= defaults.GLOBAL_MAX_WORKERS_MAX):
        return None
    return SettingProblem(
        key,
        value,
        "awa.E004",
        f"AWA['GLOBAL_MAX_WORKERS'] is {value!r}; it must be an integer of at least 1 and at most "
        f"{defaults.GLOBAL_MAX_WORKERS_MAX} (the columns that hold it), or None",
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
        params = conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg raises ProgrammingError, libpq's message says what is wrong
        return f"{exc}".strip()
    # libpq parses any value and refuses these only as it connects: the worker would retry a LISTEN
    # it can never open (or, for connect_timeout, lose its listener to a ProgrammingError).
    for port in str(params.get("port", "")).split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= PORT_MAX):
            return f"its port {port!r} is not a port number (1 to {PORT_MAX})"
    timeout = params.get("connect_timeout")
    if timeout is not None and not str(timeout).strip().lstrip("-").isdigit():
        return f"its connect_timeout {timeout!r} is not a whole number of seconds"
    sslmode = params.get("sslmode")
    if sslmode is not None and sslmode not in SSL_MODES:
        return f"its sslmode {sslmode!r} is not one of {', '.join(SSL_MODES)}"
    return None


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


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
    """A non-empty string naming an entry of DATABASES (settings.DATABASES is read as the check
    runs; ``_reset`` rebuilds the settings when it changes)."""
    aliases = sorted(getattr(settings, "DATABASES", {}))
    if isinstance(value, str) and value in aliases:
        return None
    return SettingProblem(
        key,
        value,
        "awa.E002",
        f"AWA['DATABASE_ALIAS'] is {value!r}, which is not in DATABASES",
        f"use one of {aliases}",
    )


# The rules below have one check id, awa.E015, whose text is also the InvalidSettingsError's: the
# command and the view that use these values raise it as they read them.


def _database_wait_timeout(key: str, value: object) -> SettingProblem | None:
    if is_seconds(value, zero_ok=True):
        return None
    message = (
        f"AWA['DATABASE_WAIT_TIMEOUT'] is {value!r}; it must be a number of seconds, 0 or more "
        "(0 = do not wait): fix the setting, or pass --wait-for-database SECONDS"
    )
    hint = f"remove it for the default ({DEFAULTS[key]:g} seconds)"
    return SettingProblem(key, value, "awa.E015", message, hint, error=message)


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
    if value is None:
        return None  # reads as "none"
    if not (isinstance(value, str) and value):
        message = f"AWA['METRICS'] is {value!r}; it must be 'none', 'prometheus', 'otel' or a dotted path"
        return SettingProblem(key, value, "awa.E015", message, "remove it for the default ('none')")
    problem = _sink_problem(value)
    if problem is None:
        return None
    message = f"AWA['METRICS'] is {value!r}, {problem}"
    hint = (
        "use 'none', 'prometheus' (awa-django[metrics]), 'otel' (awa-django[otel]) or the dotted path of "
        "your MetricsSink subclass, e.g. 'myproject.metrics.StatsdSink'; remove it for the default ('none')"
    )
    return SettingProblem(key, value, "awa.E015", message, hint)


def _sink_problem(name: str) -> str | None:
    """What keeps ``name`` from naming a metrics sink, or None: a known sink name, or a dotted path
    that imports to a MetricsSink subclass (imported here, as the worker will; a known sink's extra
    package is the worker's to ask for, since a check may run where the extra is not installed)."""
    from django.utils.module_loading import import_string

    from awa_django.observability.sink import SINKS, MetricsSink

    if name in SINKS:
        return None
    if "." not in name:
        return f"which is neither a known sink ({', '.join(map(repr, SINKS))}) nor a dotted path"
    try:
        target = import_string(name)
    except Exception as exc:  # ImportError, or whatever the module raises as it imports: say which
        return f"a dotted path that cannot be imported ({type(exc).__name__}: {exc})"
    if not (isinstance(target, type) and issubclass(target, MetricsSink)):
        return f"a dotted path to {target!r}, which is not a MetricsSink subclass"
    return None


EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def _event_loop(key: str, value: object) -> SettingProblem | None:
    if value in ("auto", "asyncio"):
        return None
    if value == "uvloop":
        if importlib.util.find_spec("uvloop") is not None:
            return None
        message = (
            "AWA['EVENT_LOOP'] is 'uvloop' but uvloop is not installed: pip install 'awa-django[uvloop]' "
            "(not on Windows), or set 'auto' to take it only where it is installed"
        )
        return SettingProblem(key, value, "awa.E015", message, "or set 'asyncio' for the standard loop", error=message)
    message = f"AWA['EVENT_LOOP'] is {value!r}; it must be one of {', '.join(map(repr, EVENT_LOOPS))}"
    return SettingProblem(key, value, "awa.E015", message, "remove it for the default ('auto')", error=message)


Rule = Callable[[str, object], SettingProblem | None]


def setting(default: T, rule: Rule, meaning: str, *, coerce: Callable[[Any], T] | None = None) -> T:
    """One AWA key, declared once: its field's type and default (from ``defaults`` where the
    package shares it), the ``rule`` that checks a value, the ``coerce`` that turns an accepted
    value into the field's type, and the ``meaning`` the README's settings table shows."""
    return field(default=default, metadata={"rule": rule, "meaning": meaning, "coerce": coerce})


def _as_float(value: Any) -> float:
    return float(value)


def _as_timedelta(value: Any) -> timedelta:
    """A number of seconds in settings.AWA is read as that many seconds."""
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def _metrics_name(value: Any) -> str:
    return "none" if value is None else str(value)


@dataclass(frozen=True)
class AwaSettings:
    """``settings.AWA`` with its defaults, every value checked and of its declared type.

    One ``setting(...)`` per key, in the order the checks report problems; ``find_problems``,
    ``build``, ``DEFAULTS`` and the README's settings table (``settings_table``) read them.
    """

    POLL_INTERVAL: float = setting(
        defaults.POLL_INTERVAL_DEFAULT,
        _seconds_above_zero,
        "seconds between backlog probes (one query for all idle queues) when no NOTIFY arrives",
        coerce=_as_float,
    )
    HEARTBEAT_INTERVAL: float = setting(
        defaults.HEARTBEAT_INTERVAL_DEFAULT,
        _seconds_above_zero,
        "seconds between heartbeats of running jobs",
        coerce=_as_float,
    )
    HEARTBEAT_STALENESS: float = setting(
        defaults.HEARTBEAT_STALENESS_DEFAULT,
        _seconds_above_zero,
        "age in seconds at which a running job's heartbeat is stale and the job is rescued",
        coerce=_as_float,
    )
    SHUTDOWN_TIMEOUT: float = setting(
        defaults.SHUTDOWN_TIMEOUT_DEFAULT,
        _seconds_above_zero,
        "seconds in-flight jobs get to finish after SIGTERM/SIGINT",
        coerce=_as_float,
    )
    GLOBAL_MAX_WORKERS: int | None = setting(
        None,
        _global_max_workers,
        "weighted mode when set: every queue's min_workers plus a shared overflow pool",
    )
    SYNC_THREADS: int = setting(defaults.SYNC_THREADS_DEFAULT, _count, "threads for plain `def` handlers")
    POOL_SIZE: int = setting(
        defaults.POOL_SIZE_DEFAULT,
        _count,
        "pooled connections per worker (claims, batched writes, heartbeats, snapshots); "
        "each worker also holds one LISTEN and one maintenance connection (the leader two more: retention, history)",
    )
    MAX_TAGS: int = setting(defaults.MAX_TAGS_DEFAULT, _count, "how many tags a job may have")
    MAX_TAG_LENGTH: int = setting(
        defaults.NAME_MAX_LENGTH, _tag_length, "how many characters a tag may have (at most 255)"
    )
    COMPLETED_RETENTION: timedelta = setting(
        timedelta(seconds=defaults.COMPLETED_RETENTION_DEFAULT),
        _retention,
        "completed jobs are deleted after this, or up to a partition's width later "
        "(an hour for a day; a timedelta, or seconds)",
        coerce=_as_timedelta,
    )
    FAILED_RETENTION: timedelta = setting(
        timedelta(seconds=defaults.FAILED_RETENTION_DEFAULT),
        _retention,
        "failed and cancelled jobs are deleted after this, or up to a partition's width later "
        "(six hours for a week; a timedelta, or seconds)",
        coerce=_as_timedelta,
    )
    CAPACITY_SCOPE: CapacityScope = setting(
        "process",
        _capacity_scope,
        '`"cluster"`: the capacity settings hold for every live worker together, the global maximum '
        'from the ClusterSettings row (below); `"process"`: each worker process on its own',
    )
    POOLER: Literal["transaction"] | None = setting(
        None,
        _pooler,
        '`"transaction"` behind PgBouncer in transaction mode or a managed pooler: no prepared '
        "statements, a lease row for the maintenance leader, LISTEN only on `LISTEN_DATABASE_URL`",
    )
    LISTEN_DATABASE_URL: str | None = setting(
        None,
        _listen_database_url,
        "a direct (or session-pooled) connection to the jobs' database used only for LISTEN; "
        "unset: LISTEN on `DATABASE_ALIAS`",
    )
    PREPARED_STATEMENTS: bool | None = setting(
        None,
        _prepared_statements,
        "server-side prepared statements (enqueue, the worker's hot statements); unset: on, except "
        'when `POOLER` is `"transaction"`; `True` behind a pooler only if it keeps them',
    )
    EXECUTION: Execution = setting(
        "worker",
        _execution,
        '`"immediate"` runs each job in-process after its enqueue commits (development; see Testing)',
    )
    DATABASE_ALIAS: str = setting(
        defaults.DATABASE_ALIAS_DEFAULT, _database_alias, "the database the jobs live in (enqueue and worker)"
    )
    DATABASE_WAIT_TIMEOUT: float = setting(
        defaults.DATABASE_WAIT_TIMEOUT_DEFAULT,
        _database_wait_timeout,
        "seconds `awa_worker` retries an unreachable database at startup before it exits "
        "(`--wait-for-database`; 0 = do not wait)",
        coerce=_as_float,
    )
    LISTEN: bool = setting(True, _flag, "LISTEN for wake-ups; `False`: the worker polls every `POLL_INTERVAL`")
    GC_FREEZE: bool = setting(
        True,
        _flag,
        "`awa_worker` moves its start-up objects out of the garbage collector's reach (`gc.freeze`) and "
        "collects young objects every 10,000 allocations, not 700; `False` leaves Python's collector as it is",
    )
    EVENT_LOOP: str = setting(
        "auto",
        _event_loop,
        '`awa_worker`\'s event loop: `"auto"` takes uvloop where it is installed (awa-django[uvloop]), '
        '`"uvloop"` requires it, `"asyncio"` keeps the standard loop (`--event-loop`)',
    )
    METRICS: str = setting(
        "none",
        _metrics,
        '`"prometheus"` (awa-django[metrics]), `"otel"` (awa-django[otel]) or a dotted path to a '
        "MetricsSink subclass (`--metrics`)",
        coerce=_metrics_name,
    )
    METRICS_PORT: int | None = setting(
        None, _metrics_port, "serve each worker process's Prometheus metrics on this port (`--metrics-port`)"
    )
    METRICS_ADDR: str = setting(
        "0.0.0.0",  # noqa: S104 - scraped from another host, as prometheus-client binds
        _text(optional=False, empty_ok=False),
        "the address the metrics port binds",
    )
    METRICS_TOKEN: str | None = setting(
        None,
        _text(optional=True),
        "when set, the depth view also answers requests with `Authorization: Bearer <METRICS_TOKEN>`",
    )
    METRICS_OPEN: bool = setting(
        False,
        _flag,
        "`True`: the depth view answers anyone; by default it answers only active staff users and "
        "`METRICS_TOKEN` bearers",
    )
    ADMIN_QUERY_TIMEOUT: float = setting(
        defaults.ADMIN_QUERY_TIMEOUT_DEFAULT,
        _seconds_above_zero,
        "seconds each statement of the admin's job list and bulk preview may run (a search over every state "
        "reads every unfinished job); past it the page says so and searches finished jobs only, or drops its "
        "filters, instead of failing",
        coerce=_as_float,
    )
    FAIR_KEYS_TOP: int = setting(
        defaults.FAIR_KEYS_TOP_DEFAULT,
        _count,
        "fair keys per queue and state that `awa_health --json` and the depth view name (the most "
        'available, the most running); the rest are summed as `key="other"`',
    )

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


SETTINGS: dict[str, Field[Any]] = {f.name: f for f in fields(AwaSettings)}
"""Every AWA key's declaration, in the order the checks report problems."""

DEFAULTS: dict[str, Any] = {name: f.default for name, f in SETTINGS.items()}
"""Every AWA key and its default (the checks' hints quote them)."""


def shown_default(value: object) -> str:
    """A default as the settings table writes it: Python, with strings in double quotes."""
    if isinstance(value, timedelta):
        days, seconds = divmod(value.total_seconds(), 86400)
        return f"timedelta(days={days:g})" if not seconds else f"timedelta(seconds={value.total_seconds():g})"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def settings_table() -> list[tuple[str, str, str]]:
    """The README's settings table, derived from the declarations: (key, default, meaning) rows."""
    return [(name, shown_default(f.default), f.metadata["meaning"]) for name, f in SETTINGS.items()]


def user_settings() -> dict[str, Any]:
    """``settings.AWA`` as the project wrote it (an unset or None AWA is ``{}``; so is an AWA that
    is not a mapping, so that every check still runs: ``awa_type_problem`` reports it, awa.E017)."""
    value = getattr(settings, "AWA", None)
    return dict(value) if isinstance(value, Mapping) else {}


def awa_type_problem() -> SettingProblem | None:
    """awa.E017: ``settings.AWA`` is neither unset (or None) nor a dict of settings."""
    value = getattr(settings, "AWA", None)
    if value is None or isinstance(value, Mapping):
        return None
    shown = reprlib.repr(value)
    return SettingProblem(
        "AWA",
        value,
        "awa.E017",
        f"settings.AWA is a {type(value).__name__} ({shown}); it must be a dict of awa_django settings",
        'write it as a dict, e.g. AWA = {"GLOBAL_MAX_WORKERS": 40}, or remove it for the defaults',
    )


def unknown_keys(user: Mapping[str, Any] | None = None) -> list[str]:
    """The keys of ``settings.AWA`` (or ``user``) that are not awa_django settings, sorted by their
    repr (a key need not be a string: ``AWA = {1: 2, "X": 3}`` must be reported, not crash the sort)."""
    return sorted(set(user_settings() if user is None else user) - set(DEFAULTS), key=repr)


def find_problems(user: Mapping[str, Any]) -> list[SettingProblem]:
    """Every problem with the known keys of ``user`` (the unknown ones are ``unknown_keys``)."""
    problems = []
    for key, declared in SETTINGS.items():
        if key in user:
            problem = declared.metadata["rule"](key, user[key])
            if problem is not None:
                problems.append(problem)
    return problems


def build(user: Mapping[str, Any]) -> tuple[AwaSettings, list[SettingProblem]]:
    """``user`` as ``AwaSettings`` plus the problems found; a key with a problem keeps its default,
    so the object is always usable (the checks rely on that) and always of its declared types."""
    problems = find_problems(user)
    bad = {problem.key for problem in problems}
    values = {}
    for key, value in user.items():
        if key in SETTINGS and key not in bad:
            coerce = SETTINGS[key].metadata["coerce"]
            values[key] = value if coerce is None else coerce(value)
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
        wrong_type = awa_type_problem()
        if wrong_type is not None:
            problems = [wrong_type, *problems]
        if problems:
            raise InvalidSettingsError(problems)
        _current = current
    return current


def _reset(*, setting: str, **kwargs: Any) -> None:
    global _current
    if setting in ("AWA", "DATABASES"):  # DATABASES: the E002 hint lists the aliases
        _current = None


setting_changed.connect(_reset, dispatch_uid="awa_django.conf.reset")
