"""``@job``: a function registered as the handler of a kind, and the handle it returns to enqueue
that kind's jobs (``JobHandler.enqueue`` / ``aenqueue`` / ``using``).

The kinds' map itself (``Registry``, ``registry``) is ``awa_django.handlers``, below the models
and the enqueue API, which read it; schedules declared in code are ``awa_django.schedules``.
Both are re-exported here, where ``@job`` has always been imported from.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction
from django.apps import apps

from awa_django.arguments import ArgsCheck
from awa_django.defaults import MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT, QUEUE_DEFAULT
from awa_django.exceptions import InvalidJobError
from awa_django.handlers import TASK_METADATA_KEY as TASK_METADATA_KEY
from awa_django.handlers import TASKS_BACKEND_PATH as TASKS_BACKEND_PATH
from awa_django.handlers import Handler, check_atomic, registry
from awa_django.handlers import Registry as Registry
from awa_django.handlers import RegistryError as RegistryError
from awa_django.handlers import Resolver as Resolver
from awa_django.jobspec import KIND_DEFAULTED, FairKeyRule, build_row, check_fair_key_rule
from awa_django.retry import Backoff, check_timeout, policy
from awa_django.schedules import ScheduleSpec as ScheduleSpec
from awa_django.schedules import check_schedule_args, check_schedule_key, schedule_spec, schedules
from awa_django.schedules import schedule as schedule

if TYPE_CHECKING:
    from awa_django.managers import JobManager
    from awa_django.models import Job

__all__ = [
    "TASKS_BACKEND_PATH",
    "TASK_METADATA_KEY",
    "JobCall",
    "JobHandler",
    "Registry",
    "RegistryError",
    "Resolver",
    "ScheduleSpec",
    "job",
    "registry",
    "schedule",
]

# The options an enqueue takes besides its args: handler.using(...) accepts these names.
ENQUEUE_OPTIONS = frozenset({"queue", "priority", "run_at", "max_attempts", "metadata", "tags", "unique", "fair_key"})


@dataclass(eq=False)
class JobHandler(Handler):
    """What ``@job`` returns: the registered ``Handler`` (calling it calls the function), and the
    enqueue API for its kind.

    ``handler.enqueue(user_id=1)`` and ``await handler.aenqueue(user_id=1)`` take the call's own
    arguments; enqueue options go through ``handler.using(queue=..., run_at=...)``, which returns
    a ``JobCall`` with the same two methods. The kind's rules (``queue``, ``timeout``, ``retry``,
    ``fair_key``, ``atomic``, ...) are ``Handler``'s (``awa_django.handlers``).
    """

    def using(self, **options: Any) -> JobCall:
        """Enqueue options (queue, priority, run_at, max_attempts, metadata, tags, unique, fair_key)
        for the next ``.enqueue(**args)`` / ``.aenqueue(**args)``; InvalidJobError naming a bad one."""
        return JobCall(self, {}).using(**options)

    def enqueue(self, *legacy: Any, **args: Any) -> Job:
        """Enqueue a job of this kind with ``args`` as the handler's keyword arguments."""
        if legacy:
            return _legacy_call(self, legacy, args).enqueue()
        return JobCall(self, {}).enqueue(**args)

    async def aenqueue(self, *legacy: Any, **args: Any) -> Job:
        """``enqueue`` for async code."""
        if legacy:
            return await _legacy_call(self, legacy, args, "aenqueue").aenqueue()
        return await JobCall(self, {}).aenqueue(**args)


@dataclass(frozen=True, eq=False)
class JobCall:
    """A handler and the enqueue options chosen with ``using``: ``.enqueue(**args)`` enqueues."""

    handler: JobHandler
    options: dict[str, Any]
    legacy_args: dict[str, Any] | None = None  # the deprecated .enqueue(dict) form's args

    def using(self, **options: Any) -> JobCall:
        """These options on top of the ones already chosen (the later value of a name wins)."""
        unknown = set(options) - ENQUEUE_OPTIONS
        if unknown:
            raise InvalidJobError(
                "using",
                sorted(unknown),
                f"{self.handler.kind!r}: unknown enqueue option(s); use {', '.join(sorted(ENQUEUE_OPTIONS))} "
                "(the job's own arguments go to .enqueue(**args))",
            )
        merged = {**self.options, **options}
        # None is the kind's default, as at every enqueue door: left out here, _call fills it in.
        merged = {name: value for name, value in merged.items() if value is not None or name not in KIND_DEFAULTED}
        build_row(self.handler.kind, **merged)  # the values refused now, where they are written
        return JobCall(self.handler, merged)

    def _call(self, args: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        handler = self.handler
        options = dict(self.options)
        options.setdefault("queue", handler.queue)
        options.setdefault("max_attempts", handler.max_attempts)
        options.setdefault("priority", handler.priority)
        return handler.kind, (args if self.legacy_args is None else self.legacy_args), options

    def _hint(self, args: dict[str, Any]) -> None:
        """An enqueue option passed as a job argument: say where options go."""
        check = self.handler.args_check
        if self.legacy_args is not None or check is None or not args.keys() & ENQUEUE_OPTIONS:
            return
        problem = check.problem(args)
        if problem is not None:
            raise InvalidJobError(
                "args",
                args,
                f"do not match the handler of {self.handler.kind!r}: {problem}; it is {check.text}. "
                f"Enqueue options go through {self.handler.kind}.using("
                f"{', '.join(f'{name}=...' for name in sorted(args.keys() & ENQUEUE_OPTIONS))}).enqueue(**args)",
            )

    def enqueue(self, **args: Any) -> Job:
        self._hint(args)
        kind, job_args, options = self._call(args)
        return _jobs().enqueue(kind, job_args, **options)

    async def aenqueue(self, **args: Any) -> Job:
        self._hint(args)
        kind, job_args, options = self._call(args)
        return await _jobs().aenqueue(kind, job_args, **options)


def _legacy_call(
    handler: JobHandler, legacy: tuple[Any, ...], options: dict[str, Any], method: str = "enqueue"
) -> JobCall:
    """The deprecated ``handler.enqueue({"user_id": 1}, queue=...)``: one positional dict of args,
    the keywords are enqueue options. Kept for one minor version, with a DeprecationWarning."""
    if len(legacy) != 1 or not (legacy[0] is None or isinstance(legacy[0], Mapping)):
        raise InvalidJobError(
            "args",
            legacy,
            f"{handler.kind!r}: pass the job's arguments by name, handler.enqueue(user_id=1); "
            "options go through handler.using(queue=...)",
        )
    warnings.warn(
        f"{handler.kind}.{method}(dict, **options) is deprecated: pass the arguments by name, "
        f"{handler.kind}.{method}(**args), and options through {handler.kind}.using(queue=..., ...).{method}(**args)",
        DeprecationWarning,
        stacklevel=3,
    )
    call = JobCall(handler, {}).using(**options)
    return JobCall(handler, call.options, dict(legacy[0] or {}))


def _jobs() -> JobManager[Job]:
    """``Job.objects``, through the app registry: ``@job`` runs when an app's jobs.py is imported,
    which may be before the models are (this module names them only in annotations)."""
    manager: JobManager[Job] = apps.get_model("awa", "Job")._default_manager
    return manager


def job(
    kind: str,
    *,
    queue: str = QUEUE_DEFAULT,
    max_attempts: int = MAX_ATTEMPTS_DEFAULT,
    priority: int = PRIORITY_DEFAULT,
    takes_context: bool = False,
    cron: str | None = None,
    timezone: str = "UTC",
    args: dict[str, Any] | None = None,
    missed: str = "coalesce",
    catch_up_limit: int = 100,
    paused: bool = False,
    timeout: float | None = None,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    discard_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    backoff: Backoff | Callable[[int], float] | None = None,
    fair_key: FairKeyRule | None = None,
    atomic: bool = False,
) -> Callable[[Callable[..., Any]], JobHandler]:
    """Register a handler for ``kind``. ``async def`` runs on the worker's loop, ``def`` in a thread.

    The handler receives the job's args as keyword arguments; with ``takes_context=True`` it also
    receives a ``JobContext`` as its first positional argument.

    With ``cron``, the kind is also a periodic job: a schedule named ``kind`` fires it with
    ``args`` at each slot of ``cron`` in ``timezone`` (see ``schedule`` for the other options, and
    for several schedules of one kind).

    Execution rules for the kind (``awa_django.retry``): ``timeout`` (seconds) overrides the
    queue's deadline; an exception that is an instance of a ``discard_on`` class fails the job at
    once, one of a ``retry_on`` class retries it (while attempts remain), any other follows the
    default rule (retry while attempts remain); ``backoff`` is a ``Backoff`` curve or a callable
    ``attempt -> seconds``. A bad value raises RuleError (a ValueError) here, at declaration.

    ``fair_key`` gives the kind's jobs a fairness key when their enqueue names none: a constant
    str, or a callable of the job's args dict (``lambda args: f"tenant:{args['tenant_id']}"``),
    called at enqueue; an explicit ``fair_key=`` at enqueue wins. A callable that raises or returns
    a bad key refuses that enqueue with InvalidJobError naming the kind.

    ``atomic=True`` (a ``def`` handler only): the handler runs inside ``transaction.atomic()`` on the
    jobs' database, and its completion is written in that transaction before it commits, so its
    database writes commit exactly when its job completes (docs/guide/exactly-once.md). A handler
    that raises rolls its writes back; the retry or failure is written on its own. An ``async def``
    handler, or a value that is not a bool, raises RegistryError here.
    """
    build_row(kind, queue=queue, max_attempts=max_attempts, priority=priority)  # same rules as enqueue
    if not isinstance(takes_context, bool):
        raise RegistryError(f"job {kind!r}: takes_context={takes_context!r} must be True or False")
    key_rule = check_fair_key_rule(kind, fair_key)
    kind_timeout = check_timeout(kind, timeout)
    rules = policy(kind, retry_on=retry_on, discard_on=discard_on, backoff=backoff)
    spec = None
    if cron is not None:
        spec = schedule_spec(
            kind,
            kind,
            cron,
            timezone=timezone,
            args=args,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            missed=missed,
            catch_up_limit=catch_up_limit,
            paused=paused,
            key_rule=key_rule,
        )
    elif args is not None:
        raise RegistryError(f"job {kind!r}: args= is the args of its scheduled jobs; pass cron= too, or drop args=")
    else:
        # The schedule's options mean nothing without one: @job("k", paused=True) paused nothing.
        stray = [
            f"{name}={value!r}"
            for name, value, default in (
                ("timezone", timezone, "UTC"),
                ("missed", missed, "coalesce"),
                ("catch_up_limit", catch_up_limit, 100),
                ("paused", paused, False),
            )
            if value != default or type(value) is not type(default)
        ]
        if stray:
            raise RegistryError(
                f"job {kind!r}: {', '.join(stray)} configure its schedule, and it has none; pass cron= too, "
                "or drop them (to stop a kind's jobs, pause its queue)"
            )

    def decorator(func: Callable[..., Any]) -> JobHandler:
        check_atomic(kind, func, atomic, is_async=iscoroutinefunction(func))
        try:
            check = ArgsCheck.of(func, takes_context=takes_context)
        except (TypeError, ValueError) as exc:
            raise RegistryError(f"job {kind!r}: {exc}") from None
        if spec is not None:
            check_schedule_args(spec, check)
        for declared in schedules:  # declared with schedule() before the handler existed
            if declared.kind == kind:
                check_schedule_args(declared, check)
                check_schedule_key(declared, key_rule)
        handler = JobHandler(
            kind,
            func,
            queue=queue,
            max_attempts=max_attempts,
            priority=priority,
            takes_context=takes_context,
            timeout=kind_timeout,
            retry=rules,
            fair_key=key_rule,
            atomic=atomic,
        )
        registry.register(handler)
        if spec is not None:
            schedules.add(spec)
        return handler

    return decorator
