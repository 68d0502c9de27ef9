"""``@job`` handlers by kind, autodiscovered from ``<app>/jobs.py``.

A kind with no ``@job`` handler may still be run: ``Registry.get`` then asks the registered
resolvers, in the order they were added, for a handler. The Tasks framework backend
(``awa_django.backends``) adds one that turns a ``@task``'s module path into a handler.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.utils.module_loading import autodiscover_modules

from awa_django.arguments import ArgsCheck
from awa_django.defaults import MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT, QUEUE_DEFAULT
from awa_django.exceptions import AwaError, InvalidJobError
from awa_django.jobspec import FairKeyRule, build_row, check_fair_key, check_fair_key_rule, derive_fair_key
from awa_django.retry import DEFAULT_POLICY, Backoff, RetryPolicy, check_timeout, policy
from awa_django.validation import brief

if TYPE_CHECKING:
    from awa_django.managers import JobManager
    from awa_django.models import Job

logger = logging.getLogger(__name__)

TASK_METADATA_KEY = "task"
"""The ``metadata`` key that marks a job the Tasks framework backend wrote (``awa_django.backends``);
here so that the unknown-kind hint (``Registry.unknown_kind_hint``) can tell a task's job apart."""
TASKS_BACKEND_PATH = "awa_django.backends.AwaBackend"


class RegistryError(AwaError):
    pass


# The options an enqueue takes besides its args: handler.using(...) accepts these names.
ENQUEUE_OPTIONS = frozenset({"queue", "priority", "run_at", "max_attempts", "metadata", "tags", "unique", "fair_key"})


@dataclass(eq=False)
class JobHandler:
    """A registered handler: calling it calls the function; ``.enqueue(**args)`` enqueues a job.

    ``handler.enqueue(user_id=1)`` and ``await handler.aenqueue(user_id=1)`` take the call's own
    arguments; enqueue options go through ``handler.using(queue=..., run_at=...)``, which returns
    a ``JobCall`` with the same two methods. ``timeout`` (seconds) overrides the queue's deadline
    for this kind; ``retry`` holds its ``retry_on`` / ``discard_on`` / ``backoff`` rules;
    ``fair_key`` is how its jobs get a fairness key when the enqueue names none (a constant, or a
    callable of the args dict). ``atomic`` runs a ``def`` handler inside ``transaction.atomic()`` on
    the jobs' database with its completion written in that transaction (``awa_django.worker.atomic``).
    """

    kind: str
    func: Callable[..., Any]
    queue: str = QUEUE_DEFAULT
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    priority: int = PRIORITY_DEFAULT
    takes_context: bool = False
    timeout: float | None = None
    retry: RetryPolicy = DEFAULT_POLICY
    fair_key: FairKeyRule | None = None
    atomic: bool = False
    is_async: bool = field(init=False)
    # What the signature accepts, read once here; None where it cannot be read (a builtin, a
    # callable without a signature, a context-taking signature without a positional parameter):
    # such a handler's args are checked only by the worker, when it binds them.
    args_check: ArgsCheck | None = field(init=False)

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.func)
        check_atomic(self.kind, self.func, self.atomic, is_async=self.is_async)
        try:
            self.args_check = ArgsCheck.of(self.func, takes_context=self.takes_context)
        except (TypeError, ValueError):
            self.args_check = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

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


def check_atomic(kind: str, func: Callable[..., Any], atomic: object, *, is_async: bool) -> None:
    """RegistryError naming the handler and the fix: ``atomic`` not a bool, or an ``async def``
    handler asked to be atomic (Django's transactions belong to one thread's connection, which an
    async handler's ORM calls do not keep: ``sync_to_async`` may run each on another)."""
    where = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
    if not isinstance(atomic, bool):
        raise RegistryError(f"job {kind!r} ({where}): atomic={atomic!r} must be True or False")
    if atomic and is_async:
        raise RegistryError(
            f"job {kind!r}: atomic=True needs a plain def handler, and {where} is async def; "
            "Django runs no transaction across an async handler's ORM calls. Write it as def (the worker "
            "runs it in its thread pool, on a Django connection of its own), or drop atomic=True and "
            "make its writes idempotent"
        )


def _jobs() -> JobManager:
    """``Job.objects``, through the app registry: the models import the enqueue API, which reads
    this registry, so this module never imports the models."""
    manager: JobManager = apps.get_model("awa", "Job")._default_manager
    return manager


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule declared in code: synchronised into a ``Schedule`` row at worker start."""

    name: str
    kind: str
    cron: str
    timezone: str = "UTC"
    args: dict[str, Any] = field(default_factory=dict)
    queue: str = QUEUE_DEFAULT
    priority: int = PRIORITY_DEFAULT
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    missed: str = "coalesce"
    catch_up_limit: int = 100
    paused: bool = False  # the state a new row starts in; operators pause/resume it afterwards
    fair_key: str = ""  # the fired jobs' key; "" = the kind's derived key when it fires, else the default key


Resolver = Callable[[str], JobHandler | None]
"""Given a kind that has no registered handler, return a handler for it, or None if not its kind."""


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, JobHandler] = {}
        self._resolvers: dict[Resolver, set[str]] = {}  # resolver -> the queues its jobs use
        self._schedules: dict[str, ScheduleSpec] = {}

    def register(self, handler: JobHandler) -> JobHandler:
        existing = self._handlers.get(handler.kind)
        if existing is not None and existing.func is not handler.func:
            where = f"{existing.func.__module__}.{existing.func.__qualname__}"
            raise RegistryError(
                f"job kind {handler.kind!r} is already registered by {where}; give each handler its own kind"
            )
        self._handlers[handler.kind] = handler
        return handler

    def unregister(self, kind: str) -> None:
        self._handlers.pop(kind, None)
        for name in [n for n, spec in self._schedules.items() if spec.kind == kind]:
            del self._schedules[name]

    def add_schedule(self, spec: ScheduleSpec) -> ScheduleSpec:
        existing = self._schedules.get(spec.name)
        if existing is not None and existing != spec:
            raise RegistryError(
                f"schedule {spec.name!r} is already declared (kind {existing.kind!r}, cron {existing.cron!r}); "
                "give each schedule its own name"
            )
        self._schedules[spec.name] = spec
        return spec

    def remove_schedule(self, name: str) -> None:
        self._schedules.pop(name, None)

    def schedules(self) -> list[ScheduleSpec]:
        """Every schedule declared in code, by name."""
        return [self._schedules[name] for name in sorted(self._schedules)]

    def add_resolver(self, resolver: Resolver, *, queues: Iterable[str] = ()) -> None:
        """Consult ``resolver`` for kinds with no registered handler (adding it again only adds queues).

        ``queues`` are the queues its jobs are enqueued on: ``queues()`` reports them, so a worker
        started without ``-q`` serves them.
        """
        self._resolvers.setdefault(resolver, set()).update(queues)

    def remove_resolver(self, resolver: Resolver) -> None:
        self._resolvers.pop(resolver, None)

    def registered(self, kind: str) -> JobHandler | None:
        """The ``@job`` handler registered for ``kind``, or None (resolvers are not asked)."""
        return self._handlers.get(kind)

    def get(self, kind: str) -> JobHandler | None:
        """The handler registered for ``kind``; else the first a resolver gives; else None.

        Never raises: a resolver that fails is logged and skipped (the job then fails as a job of
        an unknown kind, with the error in the log).
        """
        handler = self._handlers.get(kind)
        if handler is not None:
            return handler
        for resolver in list(self._resolvers):
            try:
                handler = resolver(kind)
            except Exception:
                logger.exception("job kind resolver failed kind=%s resolver=%r", kind, resolver)
                continue
            if handler is not None:
                return handler
        return None

    def unknown_kind_hint(self, kind: str, metadata: Mapping[str, Any] | None) -> str:
        """The fix to name when no handler here runs ``kind`` (``metadata``: the job's).

        A job the Tasks framework backend wrote needs that backend in this process's ``TASKS``
        (a worker started before it was configured has no resolver), or, when it has one, the
        task's code; any other kind needs a ``@job`` handler.
        """
        task = metadata.get(TASK_METADATA_KEY) if isinstance(metadata, Mapping) else None
        if task is None:
            return f"register one with @job({kind!r}) in an installed app's jobs.py"
        if self._resolvers:
            return (
                "it is a Tasks framework task whose module path does not import in this worker: deploy the code "
                "that defines it to the workers, or cancel its jobs if the task was removed"
            )
        alias = task.get("backend") if isinstance(task, Mapping) else None
        where = f"TASKS[{alias or 'default'!r}]"
        return (
            f"it is a Tasks framework task (enqueued through {where}) and this worker runs no Tasks backend of "
            f"awa_django: configure {where} with 'BACKEND': '{TASKS_BACKEND_PATH}' in the worker's settings, then "
            "restart the worker"
        )

    def __contains__(self, kind: object) -> bool:
        return kind in self._handlers

    def __iter__(self) -> Iterator[JobHandler]:
        return iter(list(self._handlers.values()))

    def queues(self) -> set[str]:
        """Every queue a registered handler or a resolver's jobs use."""
        names = {h.queue for h in self._handlers.values()}
        for queues in self._resolvers.values():
            names |= queues
        return names

    def autodiscover(self) -> None:
        """Import every installed app's ``jobs`` module (``AppConfig.ready`` calls this, then
        connects the ``TASKS`` backends that are awa's: see ``awa_django.apps``)."""
        autodiscover_modules("jobs")


registry = Registry()


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
    key_rule = check_fair_key_rule(kind, fair_key)
    kind_timeout = check_timeout(kind, timeout)
    rules = policy(kind, retry_on=retry_on, discard_on=discard_on, backoff=backoff)
    spec = None
    if cron is not None:
        spec = _schedule_spec(
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

    def decorator(func: Callable[..., Any]) -> JobHandler:
        check_atomic(kind, func, atomic, is_async=inspect.iscoroutinefunction(func))
        try:
            check = ArgsCheck.of(func, takes_context=takes_context)
        except (TypeError, ValueError) as exc:
            raise RegistryError(f"job {kind!r}: {exc}") from None
        if spec is not None:
            _check_schedule_args(spec, check)
        for declared in registry.schedules():  # declared with schedule() before the handler existed
            if declared.kind == kind:
                _check_schedule_args(declared, check)
                _check_schedule_key(declared, key_rule)
        handler = registry.register(
            JobHandler(
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
        )
        if spec is not None:
            registry.add_schedule(spec)
        return handler

    return decorator


def _check_schedule_args(spec: ScheduleSpec, check: ArgsCheck | None) -> None:
    """A schedule's args against its kind's handler: InvalidScheduleError naming the mismatch."""
    if check is None:
        return
    from awa_django.exceptions import InvalidScheduleError

    problem = check.problem(spec.args)
    if problem is not None:
        raise InvalidScheduleError(
            None,
            None,
            f"args {brief(spec.args)} do not match the handler of {spec.kind!r}: {problem}; it is {check.text}",
            name=spec.name,
            field="args",
        )


def _check_schedule_key(spec: ScheduleSpec, rule: FairKeyRule | None) -> None:
    """A schedule without a key of its own gets its kind's derived key when it fires: that the rule
    gives one for the schedule's args is checked where the schedule is declared."""
    if spec.fair_key or rule is None:
        return
    from awa_django.exceptions import InvalidScheduleError

    try:
        derive_fair_key(spec.kind, rule, spec.args)
    except InvalidJobError as exc:
        raise InvalidScheduleError(None, None, str(exc), name=spec.name, field="fair_key") from None


def _schedule_spec(
    name: str,
    kind: str,
    cron: str,
    *,
    timezone: str,
    args: dict[str, Any] | None,
    queue: str,
    priority: int,
    max_attempts: int,
    missed: str,
    catch_up_limit: int,
    paused: bool,
    fair_key: object = None,
    key_rule: FairKeyRule | None = None,
) -> ScheduleSpec:
    from awa_django.cron import check_policy, parse
    from awa_django.exceptions import InvalidJobError, InvalidScheduleError

    try:
        row = build_row(kind, args, queue=queue, max_attempts=max_attempts, priority=priority)
        build_row(name)  # a schedule's name follows the rules of a kind (non-empty, 255 characters)
        key = "" if fair_key is None else check_fair_key(fair_key)
    except InvalidJobError as exc:
        where = name if isinstance(name, str) else None
        raise InvalidScheduleError(None, None, str(exc), name=where, field=exc.field) from None
    spec = parse(cron, timezone, name=name)
    check_policy(missed, catch_up_limit, name=name)
    if not isinstance(paused, bool):
        raise InvalidScheduleError(None, None, f"paused={paused!r} must be True or False", name=name, field="paused")
    result = ScheduleSpec(
        name,
        kind,
        spec.expression,
        spec.timezone,
        row.args,
        queue,
        priority,
        max_attempts,
        missed,
        catch_up_limit,
        paused,
        key,
    )
    _check_schedule_key(result, key_rule)
    return result


def schedule(
    name: str,
    kind: str | JobHandler,
    cron: str,
    *,
    timezone: str = "UTC",
    args: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    missed: str = "coalesce",
    catch_up_limit: int = 100,
    paused: bool = False,
    fair_key: str | None = None,
    registry: Registry = registry,
) -> ScheduleSpec:
    """Declare a periodic job: the schedule ``name`` fires ``kind`` with ``args`` at each slot of
    ``cron`` (5 fields, or 6 with seconds first) in ``timezone`` (an IANA name).

    ``missed`` is what happens to slots that passed while no worker led: ``"coalesce"`` fires one
    job for the latest of them, ``"catch_up"`` fires each, the latest ``catch_up_limit`` at most.
    ``paused`` is the state the schedule's row starts in. Queue, priority and max_attempts default
    to the kind's ``@job`` options. ``fair_key`` is the fired jobs' fairness key; left out, they get
    the kind's ``@job(fair_key=)`` derived from ``args`` when the schedule fires, else the default
    key. Raises InvalidScheduleError naming the bad value.
    """
    handler = kind if isinstance(kind, JobHandler) else registry._handlers.get(kind)
    kind_name = kind.kind if isinstance(kind, JobHandler) else kind
    spec = _schedule_spec(
        name,
        kind_name,
        cron,
        timezone=timezone,
        args=args,
        queue=queue if queue is not None else handler.queue if handler else QUEUE_DEFAULT,
        priority=priority if priority is not None else handler.priority if handler else PRIORITY_DEFAULT,
        max_attempts=(
            max_attempts if max_attempts is not None else handler.max_attempts if handler else MAX_ATTEMPTS_DEFAULT
        ),
        missed=missed,
        catch_up_limit=catch_up_limit,
        paused=paused,
        fair_key=fair_key,
        key_rule=handler.fair_key if handler else None,
    )
    if handler is not None:
        _check_schedule_args(spec, handler.args_check)
    return registry.add_schedule(spec)
