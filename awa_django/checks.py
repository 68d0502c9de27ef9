"""System checks (ids awa.E0xx errors, awa.W0xx warnings), each with a hint that names the fix."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, transaction

from awa_django.conf import (
    DEFAULTS,
    AwaSettings,
    awa_type_problem,
    build,
    find_problems,
    unknown_keys,
    user_settings,
)


def _current() -> AwaSettings | None:
    """The settings the checks work with, or None when AWA['DATABASE_ALIAS'] itself is unusable
    (check_postgres reports that as awa.E002; the checks that need the alias then stay quiet).
    Other bad values keep their defaults here: check_settings reports them."""
    current, problems = build(user_settings())
    return None if any(problem.key == "DATABASE_ALIAS" for problem in problems) else current


def _is_postgres(config: dict[str, Any]) -> bool:
    engine = str(config.get("ENGINE", ""))
    return engine.endswith("postgresql") or "postgis" in engine


@register(Tags.compatibility)  # reads settings only: runs with every `manage.py check`
def check_postgres(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E001: the alias the jobs live in must be PostgreSQL (jobs are claimed with SKIP LOCKED);
    other aliases may be anything. awa.E002: that alias must exist."""
    errors: list[CheckMessage] = []
    current, problems = build(user_settings())
    for problem in problems:
        if problem.key == "DATABASE_ALIAS":  # not a string: it cannot name a database
            return [Error(problem.message, hint=problem.hint, id=problem.id)]
    alias = current.DATABASE_ALIAS
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


POSTGRES_APP = "django.contrib.postgres"


@register(Tags.compatibility)  # reads settings only: runs with every `manage.py check`
def check_postgres_app(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E016: the Job model's ArrayField and GinIndex need ``django.contrib.postgres`` installed.

    Django 6 refuses such a model without it (postgres.E005, at `migrate`); Django 5.2 says nothing,
    so this check says it on every version, with the one line to add."""
    from django.apps import apps

    if apps.is_installed(POSTGRES_APP):
        return []
    return [
        Error(
            f"{POSTGRES_APP!r} is not in INSTALLED_APPS; awa_django's Job model uses its ArrayField and "
            "GinIndex, which need it (Django 6 refuses to migrate without it: postgres.E005)",
            hint=f'add it before awa_django: INSTALLED_APPS = [..., "{POSTGRES_APP}", "awa_django"]',
            id="awa.E016",
        )
    ]


ROUTER_PATH = "awa_django.routers.AwaRouter"


@register(Tags.compatibility)  # asks the routers, opens no connection
def check_routing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E011: with several databases, the ORM must send awa's models to AWA['DATABASE_ALIAS'] (where
    the worker works); awa.W003: no other alias may get awa's tables from `migrate`.

    Asks Django's router chain (so a project's own router that does the same job passes too)."""
    from django.db import router

    from awa_django.models import Job

    current = _current()
    if current is None or current.DATABASE_ALIAS not in settings.DATABASES or len(settings.DATABASES) < 2:
        return []  # awa.E002 says what is wrong, or there is only one place the jobs can be
    alias = current.DATABASE_ALIAS
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
    """awa.E017 an AWA that is not a dict; awa.W001 unknown AWA keys; every rule of ``awa_django.conf``
    (awa.E002-E004, E006-E008, E010, E012-E015) as an Error; awa.E018 a heartbeat staleness not above the
    interval (each valid alone, refused together by the worker); awa.W004, W005 the pooler settings."""
    user = user_settings()
    messages: list[CheckMessage] = []
    wrong_type = awa_type_problem()
    if wrong_type is not None:  # then ``user`` is empty: every other rule sees the defaults
        messages.append(Error(wrong_type.message, hint=wrong_type.hint, id=wrong_type.id))
    for key in unknown_keys(user):
        messages.append(
            Warning(
                f"AWA[{key!r}] is not an awa_django setting and is ignored",
                hint=f"known settings: {', '.join(sorted(DEFAULTS))}",
                id="awa.W001",
            )
        )
    problems = find_problems(user)
    for problem in problems:
        if problem.id != "awa.E002":  # check_postgres says it, next to the other alias problems
            messages.append(Error(problem.message, hint=problem.hint, id=problem.id))
    current, _ = build(user)
    bad = {problem.key for problem in problems}
    if not {"HEARTBEAT_INTERVAL", "HEARTBEAT_STALENESS"} & bad and (
        current.HEARTBEAT_STALENESS <= current.HEARTBEAT_INTERVAL
    ):
        # The worker refuses this pair at start (WorkerConfig); each value alone passes awa.E003.
        messages.append(
            Error(
                f"AWA['HEARTBEAT_STALENESS'] ({current.HEARTBEAT_STALENESS:g}s) does not exceed "
                f"AWA['HEARTBEAT_INTERVAL'] ({current.HEARTBEAT_INTERVAL:g}s): a live job would be rescued "
                "between two heartbeats; workers refuse this configuration",
                hint=f"raise HEARTBEAT_STALENESS above {current.HEARTBEAT_INTERVAL:g}, to a few intervals "
                "(the defaults are 5 and 30), or lower HEARTBEAT_INTERVAL",
                id="awa.E018",
            )
        )
    messages.extend(_pooler_warnings(current))
    return messages


@register()
def check_capacity(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E005: with AWA['GLOBAL_MAX_WORKERS'] set, the Queue rows' min_workers must fit in it.

    Reads the Queue rows, so it is skipped (silently) while the database is unreachable or not
    yet migrated: `check` must work before `migrate`.
    """
    from awa_django.concurrency import QueueLimits, collect_capacity_errors
    from awa_django.exceptions import MinWorkersExceedGlobalError

    current, problems = build(user_settings())
    global_max, alias = current.GLOBAL_MAX_WORKERS, current.DATABASE_ALIAS
    if (
        global_max is None
        or alias not in settings.DATABASES
        or {"GLOBAL_MAX_WORKERS", "DATABASE_ALIAS"} & {problem.key for problem in problems}
    ):
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
def check_fair_keys(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.W007: in hard-reserved mode, a key cap (a Queue's key_max_running or a FairKey row's
    max_running) above the queue's max_workers, which one worker never reaches; awa.W008: a
    FairKey row for a queue that has no Queue row and no registered handler (a misspelt name?).

    Reads the Queue and FairKey rows, so like awa.E009 it runs only for the jobs' database among
    ``databases`` and is skipped while that database is unreachable or not yet migrated.
    """
    from awa_django.defaults import MAX_WORKERS_DEFAULT
    from awa_django.registry import registry

    current, problems = build(user_settings())
    alias = current.DATABASE_ALIAS
    if alias not in settings.DATABASES or {"GLOBAL_MAX_WORKERS", "DATABASE_ALIAS"} & {p.key for p in problems}:
        return []
    if not databases or alias not in databases:
        return []
    try:
        from awa_django.models import FairKey, Queue

        with transaction.atomic(using=alias):  # a savepoint: a missing table must not break the caller's transaction
            queues = {
                name: (max_workers, cap)
                for name, max_workers, cap in Queue.objects.using(alias).values_list(
                    "name", "max_workers", "key_max_running"
                )
            }
            rows = list(
                FairKey.objects.using(alias).order_by("queue", "key").values_list("queue", "key", "max_running")
            )
    except DatabaseError:
        return []
    messages: list[CheckMessage] = []
    hard_reserved = current.GLOBAL_MAX_WORKERS is None
    caps: list[tuple[str, str, int, int]] = []  # queue, whose cap, cap, max_workers
    if hard_reserved:
        for name, (max_workers, cap) in sorted(queues.items()):
            if cap is not None and cap > max_workers:
                caps.append((name, "key_max_running", cap, max_workers))
        for queue, key, cap in rows:
            max_workers = queues.get(queue, (MAX_WORKERS_DEFAULT, None))[0]
            if cap is not None and cap > max_workers:
                caps.append((queue, f"the max_running of key {key!r}", cap, max_workers))
    for queue, whose, cap, max_workers in caps:
        messages.append(
            Warning(
                f"queue {queue!r}: {whose} ({cap}) is above its max_workers ({max_workers}) in hard-reserved mode; "
                f"one worker never runs more than {max_workers} of the queue's jobs, so the cap binds only when "
                "several workers serve the queue",
                hint=f"lower the cap to at most {max_workers} (the Queue or Fair key overrides admin) if one worker "
                "serves the queue, or leave it empty for unlimited",
                obj=queue,
                id="awa.W007",
            )
        )
    used = set(queues) | registry.queues()
    for queue in sorted({queue for queue, _, _ in rows} - used):
        keys = [key for q, key, _ in rows if q == queue]
        messages.append(
            Warning(
                f"fair key overrides name queue {queue!r} ({len(keys)} key(s), e.g. {keys[0]!r}), which has no Queue "
                "row and no registered handler: no job may ever use them",
                hint=f"correct the queue name in the Fair key overrides admin, or delete the rows if queue {queue!r} "
                "is gone",
                obj=queue,
                id="awa.W008",
            )
        )
    return messages


@register(Tags.database)  # reads rows: runs with `migrate` and `check --database default`
def check_schedules(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E009: a Schedule row's cron or time zone is invalid (the leader would skip it);
    awa.W002: an active schedule fires a kind no handler runs (its jobs would fail); awa.W009: an
    active schedule's args do not fit its handler's signature (each fire's enqueue would refuse them).

    Schedules declared in code are validated when declared (``@job(cron=…)``, ``schedule(…)``);
    this catches rows written around the admin form. Skipped while the database is unreachable.
    """
    from awa_django.cron import parse
    from awa_django.exceptions import InvalidScheduleError
    from awa_django.registry import registry

    current = _current()
    if current is None:
        return []
    alias = current.DATABASE_ALIAS
    if alias not in settings.DATABASES or not databases or alias not in databases:
        return []
    try:
        from awa_django.models import Schedule

        with transaction.atomic(using=alias):
            rows = list(
                Schedule.objects.using(alias)
                .order_by("name")
                .values_list("name", "kind", "cron", "timezone", "paused", "removed_from_code_at", "args")
            )
    except DatabaseError:
        return []
    messages: list[CheckMessage] = []
    for name, kind, cron, tz, paused, removed, args in rows:
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
        if paused or removed is not None:
            continue
        handler = registry.get(kind)
        if handler is None:
            messages.append(
                Warning(
                    f"schedule {name!r} fires kind {kind!r}, which no @job handler registers; its jobs would fail",
                    hint=f"register a handler with @job({kind!r}), or pause or delete schedule {name!r}",
                    obj=name,
                    id="awa.W002",
                )
            )
            continue
        check = handler.args_check
        if not isinstance(args, dict):
            mismatch: str | None = f"args {args!r:.80} are not a JSON object"
        else:
            mismatch = check.mismatch(kind, args) if check is not None else None
        if mismatch is not None:
            messages.append(
                Warning(
                    f"schedule {name!r}: {mismatch}; each job it fires would be refused",
                    hint=f"correct the args of schedule {name!r} in the Schedule admin (or in the code that "
                    "declares it), or pause it",
                    obj=name,
                    id="awa.W009",
                )
            )
    return messages


@register(Tags.compatibility)  # asks the routers, opens no connection
def check_atomic_databases(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.W010: ``@job(atomic=True)`` handlers are registered, and the routers send some models'
    writes to another database than the jobs' (AWA['DATABASE_ALIAS']): an atomic handler's
    transaction covers the jobs' database only, so its writes there commit on their own."""
    from django.apps import apps
    from django.db import router

    from awa_django.registry import registry

    kinds = sorted(handler.kind for handler in registry if handler.atomic)
    current = _current()
    if not kinds or current is None or current.DATABASE_ALIAS not in settings.DATABASES:
        return []
    alias = current.DATABASE_ALIAS
    elsewhere: dict[str, list[str]] = {}
    for model in apps.get_models():
        if model._meta.app_label == "awa":
            continue
        target = router.db_for_write(model)
        if target != alias:
            elsewhere.setdefault(str(target), []).append(model._meta.label)
    if not elsewhere:
        return []
    where = "; ".join(
        f"{db!r}: {', '.join(labels[:4])}{f' and {len(labels) - 4} more' if len(labels) > 4 else ''}"
        for db, labels in sorted(elsewhere.items())
    )
    shown = ", ".join(repr(kind) for kind in kinds[:5]) + (f" and {len(kinds) - 5} more" if len(kinds) > 5 else "")
    return [
        Warning(
            f"atomic handlers ({shown}) commit their writes with their completion on database {alias!r} "
            f"(AWA['DATABASE_ALIAS']) only; models written to another database ({where}) commit on their own, "
            "and a rescued attempt writes them again",
            hint=f"have atomic handlers write only models routed to {alias!r} (DATABASE_ROUTERS), put the jobs in "
            "their models' database (AWA['DATABASE_ALIAS']), or make their other writes idempotent; silence this "
            "with SILENCED_SYSTEM_CHECKS = ['awa.W010'] once they are",
            id="awa.W010",
        )
    ]


@register(Tags.compatibility)  # reads settings and the registry only
def check_atomic_connections(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.W011: ``@job(atomic=True)`` handlers are registered and the jobs' database has Django's
    default ``CONN_MAX_AGE`` of 0, so the worker opens and closes a connection for every atomic
    attempt (its thread's connection is closed after each job, as at the end of a request). Not
    said behind a transaction pooler (AWA['POOLER']), where a connection is the pooler's to keep."""
    from awa_django.registry import registry

    kinds = sorted(handler.kind for handler in registry if handler.atomic)
    current = _current()
    if not kinds or current is None or current.POOLER == "transaction":
        return []
    alias = current.DATABASE_ALIAS
    if alias not in settings.DATABASES or settings.DATABASES[alias].get("CONN_MAX_AGE", 0) != 0:
        return []
    shown = ", ".join(repr(kind) for kind in kinds[:5]) + (f" and {len(kinds) - 5} more" if len(kinds) > 5 else "")
    return [
        Warning(
            f"atomic handlers ({shown}) run on database {alias!r} with CONN_MAX_AGE = 0: the worker connects and "
            "disconnects for every atomic attempt, which costs more than the attempt itself",
            hint=f"set DATABASES[{alias!r}]['CONN_MAX_AGE'] (e.g. 600) and 'CONN_HEALTH_CHECKS': True in the workers' "
            "settings, so each worker thread keeps its connection",
            obj=alias,
            id="awa.W011",
        )
    ]


def _pooler_warnings(current: AwaSettings) -> list[CheckMessage]:
    """awa.W004 polling only behind a transaction pooler; awa.W005 Django's server-side cursors left
    on behind one. (The values themselves are checked by ``awa_django.conf``: awa.E012-E014.)"""
    messages: list[CheckMessage] = []
    if current.POOLER == "transaction":
        if current.LISTEN and not current.LISTEN_DATABASE_URL:
            messages.append(
                Warning(
                    "behind a transaction pooler without AWA['LISTEN_DATABASE_URL'] the worker cannot LISTEN: "
                    f"new jobs wait up to AWA['POLL_INTERVAL'] ({current.POLL_INTERVAL!r}s) to be picked up",
                    hint="set AWA['LISTEN_DATABASE_URL'] to a direct connection to the same database (LISTEN needs "
                    "a session), or set AWA['LISTEN'] = False to choose polling",
                    id="awa.W004",
                )
            )
        alias = current.DATABASE_ALIAS
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
    current = _current()
    if current is None:
        return []
    alias = current.DATABASE_ALIAS
    if current.POOLER == "transaction" or not databases or alias not in databases:
        return []
    if alias not in settings.DATABASES or not _is_postgres(settings.DATABASES[alias]):
        return []
    import psycopg

    from awa_django.dbparams import connection_kwargs

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
