"""``@job`` handlers by kind, autodiscovered from ``<app>/jobs.py``.

A kind with no ``@job`` handler may still be run: ``Registry.get`` then asks the registered
resolvers, in the order they were added, for a handler. The Tasks framework backend
(``awa_django.backends``) adds one that turns a ``@task``'s module path into a handler.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.utils.module_loading import autodiscover_modules

from awa_django.defaults import MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT, QUEUE_DEFAULT
from awa_django.exceptions import AwaError
from awa_django.jobspec import build_row

if TYPE_CHECKING:
    from awa_django.managers import JobManager
    from awa_django.models import Job

logger = logging.getLogger(__name__)


class RegistryError(AwaError):
    pass


@dataclass(eq=False)
class JobHandler:
    """A registered handler: calling it calls the function; ``.enqueue(**args)`` enqueues a job."""

    kind: str
    func: Callable[..., Any]
    queue: str = QUEUE_DEFAULT
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    priority: int = PRIORITY_DEFAULT
    takes_context: bool = False
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        options.setdefault("queue", self.queue)
        options.setdefault("max_attempts", self.max_attempts)
        options.setdefault("priority", self.priority)
        return options

    def enqueue(self, args: dict[str, Any] | None = None, **options: Any) -> Job:
        return _jobs().enqueue(self.kind, args, **self._options(options))

    async def aenqueue(self, args: dict[str, Any] | None = None, **options: Any) -> Job:
        return await _jobs().aenqueue(self.kind, args, **self._options(options))


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
) -> Callable[[Callable[..., Any]], JobHandler]:
    """Register a handler for ``kind``. ``async def`` runs on the worker's loop, ``def`` in a thread.

    The handler receives the job's args as keyword arguments; with ``takes_context=True`` it also
    receives a ``JobContext`` as its first positional argument.

    With ``cron``, the kind is also a periodic job: a schedule named ``kind`` fires it with
    ``args`` at each slot of ``cron`` in ``timezone`` (see ``schedule`` for the other options, and
    for several schedules of one kind).
    """
    build_row(kind, queue=queue, max_attempts=max_attempts, priority=priority)  # same rules as enqueue
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
        )
    elif args is not None:
        raise RegistryError(f"job {kind!r}: args= is the args of its scheduled jobs; pass cron= too, or drop args=")

    def decorator(func: Callable[..., Any]) -> JobHandler:
        handler = registry.register(
            JobHandler(
                kind,
                func,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                takes_context=takes_context,
            )
        )
        if spec is not None:
            registry.add_schedule(spec)
        return handler

    return decorator


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
) -> ScheduleSpec:
    from awa_django.cron import check_policy, parse
    from awa_django.exceptions import InvalidJobError, InvalidScheduleError

    try:
        row = build_row(kind, args, queue=queue, max_attempts=max_attempts, priority=priority)
        build_row(name)  # a schedule's name follows the rules of a kind (non-empty, 255 characters)
    except InvalidJobError as exc:
        where = name if isinstance(name, str) else None
        raise InvalidScheduleError(None, None, str(exc), name=where, field=exc.field) from None
    spec = parse(cron, timezone, name=name)
    check_policy(missed, catch_up_limit, name=name)
    if not isinstance(paused, bool):
        raise InvalidScheduleError(None, None, f"paused={paused!r} must be True or False", name=name, field="paused")
    return ScheduleSpec(
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
    )


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
    registry: Registry = registry,
) -> ScheduleSpec:
    """Declare a periodic job: the schedule ``name`` fires ``kind`` with ``args`` at each slot of
    ``cron`` (5 fields, or 6 with seconds first) in ``timezone`` (an IANA name).

    ``missed`` is what happens to slots that passed while no worker led: ``"coalesce"`` fires one
    job for the latest of them, ``"catch_up"`` fires each, the latest ``catch_up_limit`` at most.
    ``paused`` is the state the schedule's row starts in. Queue, priority and max_attempts default
    to the kind's ``@job`` options. Raises InvalidScheduleError naming the bad value.
    """
    handler = kind if isinstance(kind, JobHandler) else registry._handlers.get(kind)
    kind_name = kind.kind if isinstance(kind, JobHandler) else kind
    return registry.add_schedule(
        _schedule_spec(
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
        )
    )
