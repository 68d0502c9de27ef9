"""System checks (ids awa.E0xx errors, awa.W0xx warnings), each with a hint that names the fix."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, transaction

from awa_django.conf import DEFAULTS, EXECUTION_MODES, awa_settings


@register(Tags.compatibility)  # reads settings only: runs with every `manage.py check`
def check_postgres(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.E001: every database alias must be PostgreSQL (jobs are claimed with SKIP LOCKED)."""
    errors: list[CheckMessage] = []
    for alias, config in settings.DATABASES.items():
        engine = str(config.get("ENGINE", ""))
        if not engine.endswith("postgresql") and "postgis" not in engine:
            errors.append(
                Error(
                    f"database {alias!r} uses {engine!r}; awa_django supports PostgreSQL only",
                    hint="set its ENGINE to 'django.db.backends.postgresql' (Postgres 13 or newer), "
                    "or remove awa_django from INSTALLED_APPS",
                    obj=alias,
                    id="awa.E001",
                )
            )
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


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """awa.W001 unknown AWA keys; awa.E003, E004, E006, E007 bad numbers; awa.E008 a bad EXECUTION; awa.E010 a bad
    CAPACITY_SCOPE."""
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
