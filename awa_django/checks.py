"""System checks (ids awa.E0xx errors, awa.W0xx warnings), each with a hint that names the fix."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, transaction

from awa_django.conf import DEFAULTS, EXECUTION_MODES, POOLER_MODES, awa_settings


def _is_postgres(config: dict[str, Any]) -> bool:
    engine = str(config.get("ENGINE", ""))
    return engine.endswith("postgresql") or "postgis" in engine


@register(Tags.compatibility)  # reads settings only: runs with every `manage.py check`
def check_postgres(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E001: the alias the jobs live in must be PostgreSQL (jobs are claimed with SKIP LOCKED);
    other aliases may be anything. awa.E002: that alias must exist."""
    errors: list[CheckMessage] = []
    alias = awa_settings.DATABASE_ALIAS
    if alias not in settings.DATABASES:
        errors.append(
            Error(
                f"AWA['DATABASE_ALIAS'] is {alias!r}, which is not in DATABASES",
                hint=f"use one of {sorted(settings.DATABASES)}",
                id="awa.E002",
            )
        )
        return errors
    config = settings.DATABASES[alias]
    if not _is_postgres(config):
        postgres = sorted(name for name, other in settings.DATABASES.items() if _is_postgres(other))
        errors.append(
            Error(
                f"database {alias!r} (AWA['DATABASE_ALIAS']) uses {str(config.get('ENGINE', ''))!r}; "
                "awa_django keeps its jobs in PostgreSQL only",
                hint="set its ENGINE to 'django.db.backends.postgresql' (Postgres 13 or newer)"
                + (f", or point AWA['DATABASE_ALIAS'] at one of {postgres}" if postgres else "")
                + "; other aliases may use any engine",
                obj=alias,
                id="awa.E001",
            )
        )
    return errors


ROUTER_PATH = "awa_django.routers.AwaRouter"


@register(Tags.compatibility)  # asks the routers, opens no connection
def check_routing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E011: with several databases, the ORM must send awa's models to AWA['DATABASE_ALIAS'] (where
    the worker works); awa.W003: no other alias may get awa's tables from `migrate`.

    Asks Django's router chain (so a project's own router that does the same job passes too)."""
    from django.db import router

    from awa_django.models import Job

    alias = awa_settings.DATABASE_ALIAS
    if alias not in settings.DATABASES or len(settings.DATABASES) < 2:
        return []  # awa.E002 says what is wrong, or there is only one place the jobs can be
    messages: list[CheckMessage] = []
    read, write = router.db_for_read(Job), router.db_for_write(Job)
    if read != alias or write != alias:
        messages.append(
            Error(
                f"awa_django's models are read from {read!r} and written to {write!r}, but the jobs are in "
                f"{alias!r} (AWA['DATABASE_ALIAS']): the admin and Job.objects would not see what the worker does",
                hint=f"add {ROUTER_PATH!r} to DATABASE_ROUTERS, before any router that claims every app",
                id="awa.E011",
            )
        )
    wrong = sorted(other for other in settings.DATABASES if other != alias and router.allow_migrate(other, "awa"))
    if wrong:
        messages.append(
            Warning(
                f"`migrate --database {wrong[0]}` would create awa_django's tables on {wrong!r}, "
                f"but the jobs are in {alias!r} (AWA['DATABASE_ALIAS'])",
                hint=f"add {ROUTER_PATH!r} to DATABASE_ROUTERS: it migrates the awa app on {alias!r} only",
                id="awa.W003",
            )
        )
    return messages


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.W001 unknown AWA keys; awa.E003, E004, E006, E007 bad numbers; awa.E008 a bad EXECUTION; awa.E010 a bad
    CAPACITY_SCOPE; awa.E012-E014, W004, W005 the pooler settings."""
    messages: list[CheckMessage] = []
    for key in awa_settings.unknown_keys():
        messages.append(
            Warning(
                f"AWA[{key!r}] is not an awa_django setting and is ignored",
                hint=f"known settings: {', '.join(sorted(DEFAULTS))}",
                id="awa.W001",
            )
        )
    for key in ("POLL_INTERVAL", "HEARTBEAT_INTERVAL", "HEARTBEAT_STALENESS", "SHUTDOWN_TIMEOUT"):
        value = getattr(awa_settings, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            messages.append(
                Error(
                    f"AWA[{key!r}] is {value!r}; it must be a number of seconds above 0",
                    hint=f"set AWA[{key!r}] to e.g. {DEFAULTS[key]!r}, or remove it for the default",
                    id="awa.E003",
                )
            )
    global_max = awa_settings.GLOBAL_MAX_WORKERS
    if global_max is not None and (isinstance(global_max, bool) or not isinstance(global_max, int) or global_max < 1):
        messages.append(
            Error(
                f"AWA['GLOBAL_MAX_WORKERS'] is {global_max!r}; it must be an integer of at least 1, or None",
                hint="set it to the number of jobs one worker may run at once, or None for hard-reserved mode",
                id="awa.E004",
            )
        )
    for key in ("SYNC_THREADS", "POOL_SIZE", "MAX_TAGS", "MAX_TAG_LENGTH"):
        value = getattr(awa_settings, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            messages.append(
                Error(
                    f"AWA[{key!r}] is {value!r}; it must be an integer of at least 1",
                    hint=f"set AWA[{key!r}] to e.g. {DEFAULTS[key]!r}, or remove it for the default",
                    id="awa.E006",
                )
            )
    for key in ("COMPLETED_RETENTION", "FAILED_RETENTION"):
        value = getattr(awa_settings, key)
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            messages.append(
                Error(
                    f"AWA[{key!r}] is {value!r}; it must be a timedelta or a number of seconds above 0",
                    hint=f"set AWA[{key!r}] to e.g. timedelta(days=1), or remove it for the default",
                    id="awa.E007",
                )
            )
    scope = awa_settings.CAPACITY_SCOPE
    if scope not in ("process", "cluster"):
        messages.append(
            Error(
                f"AWA['CAPACITY_SCOPE'] is {scope!r}; it must be 'process' or 'cluster'",
                hint="'process' (the default): each worker process applies the capacity settings on its own; "
                "'cluster': they hold for every live worker together",
                id="awa.E010",
            )
        )
    messages.extend(_pooler_settings_messages())
    execution = awa_settings.EXECUTION
    if execution not in EXECUTION_MODES:
        messages.append(
            Error(
                f"AWA['EXECUTION'] is {execution!r}; it must be one of {', '.join(map(repr, EXECUTION_MODES))}",
                hint="use 'worker' (the default: awa_worker runs the jobs), or 'immediate' in development "
                "to run each job in-process right after its enqueue commits",
                id="awa.E008",
            )
        )
    return messages


@register()
def check_capacity(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E005: with AWA['GLOBAL_MAX_WORKERS'] set, the Queue rows' min_workers must fit in it.

    Reads the Queue rows, so it is skipped (silently) while the database is unreachable or not
    yet migrated: `check` must work before `migrate`.
    """
    from awa_django.concurrency import QueueLimits, check_global_max_workers, collect_capacity_errors
    from awa_django.exceptions import MinWorkersExceedGlobalError

    global_max = awa_settings.GLOBAL_MAX_WORKERS
    alias = awa_settings.DATABASE_ALIAS
    if global_max is None or check_global_max_workers(global_max) is not None or alias not in settings.DATABASES:
        return []  # hard-reserved mode, or awa.E004 / awa.E002 already says what is wrong
    try:
        from awa_django.models import Queue

        with transaction.atomic(using=alias):  # a savepoint: a missing table must not break the caller's transaction
            rows = list(Queue.objects.using(alias).order_by("-min_workers", "name").values_list("name", "min_workers"))
    except DatabaseError:
        return []
    queues = {name: QueueLimits(min_workers=min_workers) for name, min_workers in rows}
    messages: list[CheckMessage] = []
    for error in collect_capacity_errors(global_max, queues):
        if isinstance(error, MinWorkersExceedGlobalError):
            largest = ", ".join(f"{name}={n}" for name, n in rows[:5] if n)
            messages.append(
                Error(
                    f"the Queue rows' sum of min_workers ({error.sum_min_workers}) exceeds "
                    f"AWA['GLOBAL_MAX_WORKERS'] ({error.global_max_workers}); workers would refuse this configuration",
                    hint=f"raise AWA['GLOBAL_MAX_WORKERS'] to at least {error.sum_min_workers}, or lower min_workers "
                    f"in the Queue admin by {error.sum_min_workers - error.global_max_workers} in total "
                    f"(largest: {largest})",
                    id="awa.E005",
                )
            )
    return messages


@register(Tags.database)  # reads rows: runs with `migrate` and `check --database default`
def check_schedules(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E009: a Schedule row's cron or time zone is invalid (the leader would skip it);
    awa.W002: an active schedule fires a kind no handler runs (its jobs would fail).

    Schedules declared in code are validated when declared (``@job(cron=…)``, ``schedule(…)``);
    this catches rows written around the admin form. Skipped while the database is unreachable.
    """
    from awa_django.cron import parse
    from awa_django.exceptions import InvalidScheduleError
    from awa_django.registry import registry

    alias = awa_settings.DATABASE_ALIAS
    if alias not in settings.DATABASES or not databases or alias not in databases:
        return []
    try:
        from awa_django.models import Schedule

        with transaction.atomic(using=alias):
            rows = list(
                Schedule.objects.using(alias)
                .order_by("name")
                .values_list("name", "kind", "cron", "timezone", "paused", "removed_from_code_at")
            )
    except DatabaseError:
        return []
    messages: list[CheckMessage] = []
    for name, kind, cron, tz, paused, removed in rows:
        try:
            parse(cron, tz, name=name)
        except InvalidScheduleError as exc:
            messages.append(
                Error(
                    str(exc),
                    hint=f"correct schedule {name!r} in the Schedule admin (or in the code that declares it)",
                    obj=name,
                    id="awa.E009",
                )
            )
        if not paused and removed is None and registry.get(kind) is None:
            messages.append(
                Warning(
                    f"schedule {name!r} fires kind {kind!r}, which no @job handler registers; its jobs would fail",
                    hint=f"register a handler with @job({kind!r}), or pause or delete schedule {name!r}",
                    obj=name,
                    id="awa.W002",
                )
            )
    return messages


def _pooler_settings_messages() -> list[CheckMessage]:
    """awa.E012 a bad POOLER; awa.E013 a bad LISTEN_DATABASE_URL; awa.E014 a non-boolean
    PREPARED_STATEMENTS; awa.W004 polling only behind a transaction pooler; awa.W005 Django's
    server-side cursors left on behind one."""
    messages: list[CheckMessage] = []
    pooler = awa_settings.POOLER
    if pooler not in POOLER_MODES:
        messages.append(
            Error(
                f"AWA['POOLER'] is {pooler!r}; it must be None or 'transaction'",
                hint="None (the default): a direct connection or a session pooler; 'transaction': PgBouncer in "
                "transaction mode or a managed pooler that hands each transaction any server session",
                id="awa.E012",
            )
        )
    url = awa_settings.LISTEN_DATABASE_URL
    if url is not None:
        problem = _conninfo_problem(url)
        if problem:
            messages.append(
                Error(
                    f"AWA['LISTEN_DATABASE_URL'] is not a PostgreSQL connection string: {problem}",
                    hint="use a URL such as 'postgresql://user:password@db-host:5432/dbname' (a direct connection, "
                    "not the pooler), or None to LISTEN on AWA['DATABASE_ALIAS']",
                    id="awa.E013",
                )
            )
    prepared = awa_settings.PREPARED_STATEMENTS
    if prepared is not None and not isinstance(prepared, bool):
        messages.append(
            Error(
                f"AWA['PREPARED_STATEMENTS'] is {prepared!r}; it must be True, False or None",
                hint="None (the default): on, except behind a transaction pooler (AWA['POOLER'] = 'transaction')",
                id="awa.E014",
            )
        )
    if pooler == "transaction":
        if awa_settings.LISTEN and not url:
            messages.append(
                Warning(
                    "behind a transaction pooler without AWA['LISTEN_DATABASE_URL'] the worker cannot LISTEN: "
                    f"new jobs wait up to AWA['POLL_INTERVAL'] ({awa_settings.POLL_INTERVAL!r}s) to be picked up",
                    hint="set AWA['LISTEN_DATABASE_URL'] to a direct connection to the same database (LISTEN needs "
                    "a session), or set AWA['LISTEN'] = False to choose polling",
                    id="awa.W004",
                )
            )
        alias = awa_settings.DATABASE_ALIAS
        config = settings.DATABASES.get(alias, {})
        if alias in settings.DATABASES and not config.get("DISABLE_SERVER_SIDE_CURSORS"):
            messages.append(
                Warning(
                    f"database {alias!r} is behind a transaction pooler but keeps Django's server-side cursors "
                    "(QuerySet.iterator() would fail: the cursor lives in a session the pooler does not keep)",
                    hint=f"set DATABASES[{alias!r}]['DISABLE_SERVER_SIDE_CURSORS'] = True",
                    obj=alias,
                    id="awa.W005",
                )
            )
    return messages


def _conninfo_problem(url: object) -> str | None:
    if not isinstance(url, str) or not url.strip():
        return f"{url!r} is not a non-empty string"
    from psycopg import conninfo

    try:
        conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg raises ProgrammingError, libpq's message says what is wrong
        return f"{exc}".strip()
    return None


# How many pairs of sessions the pooler probe compares (each a round trip on two connections).
POOLER_PROBES = 3


@register(Tags.database)  # opens connections: runs with `migrate` and `check --database <alias>`
def check_pooler(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.W006: the jobs' database is reached through a transaction pooler but AWA['POOLER'] does
    not say so (the worker's prepared statements and leader lock would break).

    The proof: two sessions open at the same time cannot share a Postgres backend, except through a
    transaction (or statement) pooler. One session runs a statement and goes idle, the other runs
    one: a transaction pooler hands it the same server connection, with the same backend pid. The
    probe can miss a pooler (a busy one may hand out another connection) but never sees one that
    is not there. Skipped while the database is unreachable."""
    alias = awa_settings.DATABASE_ALIAS
    if awa_settings.POOLER == "transaction" or not databases or alias not in databases:
        return []
    if alias not in settings.DATABASES or not _is_postgres(settings.DATABASES[alias]):
        return []
    import psycopg

    from awa_django.worker.db import connection_kwargs

    params = connection_kwargs(alias)
    params["prepare_threshold"] = None
    params["application_name"] = "awa_check:pooler"
    try:
        with psycopg.connect(**params) as first, psycopg.connect(**params) as second:
            for _ in range(POOLER_PROBES):
                pid = _backend_pid(first)
                if pid is not None and pid == _backend_pid(second):
                    return [
                        Warning(
                            f"database {alias!r} is reached through a transaction pooler (two open sessions were "
                            f"served by the same Postgres backend, pid {pid}), but AWA['POOLER'] is not set",
                            hint="set AWA['POOLER'] = 'transaction' (no prepared statements, a lease for the "
                            "maintenance leader) and AWA['LISTEN_DATABASE_URL'] to a direct connection if there is one",
                            obj=alias,
                            id="awa.W006",
                        )
                    ]
    except psycopg.Error:
        return []
    return []


def _backend_pid(conn: Any) -> int | None:
    from awa_django.sql import statements

    row = conn.execute(statements["read_backend_pid"]).fetchone()
    return int(row[0]) if row else None
