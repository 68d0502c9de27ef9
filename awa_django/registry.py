"""``@job`` handlers by kind, autodiscovered from ``<app>/jobs.py``.

A kind with no ``@job`` handler may still be run: ``Registry.get`` then asks the registered
resolvers, in the order they were added, for a handler. The Tasks framework backend
(``awa_django.backends``) adds one that turns a ``@task``'s module path into a handler.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils.module_loading import autodiscover_modules

from awa_django.exceptions import AwaError

if TYPE_CHECKING:
    from awa_django.models import Job

logger = logging.getLogger(__name__)


class RegistryError(AwaError):
    pass


@dataclass(eq=False)
class JobHandler:
    """A registered handler: calling it calls the function; ``.enqueue(**args)`` enqueues a job."""

    kind: str
    func: Callable[..., Any]
    queue: str = "default"
    max_attempts: int = 25
    priority: int = 2
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
        from awa_django.models import Job

        return Job.objects.enqueue(self.kind, args, **self._options(options))

    async def aenqueue(self, args: dict[str, Any] | None = None, **options: Any) -> Job:
        from awa_django.models import Job

        return await Job.objects.aenqueue(self.kind, args, **self._options(options))


Resolver = Callable[[str], JobHandler | None]
"""Given a kind that has no registered handler, return a handler for it, or None if not its kind."""


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, JobHandler] = {}
        self._resolvers: dict[Resolver, set[str]] = {}  # resolver -> the queues its jobs use

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

    def add_resolver(self, resolver: Resolver, *, queues: Iterable[str] = ()) -> None:
        """Consult ``resolver`` for kinds with no registered handler (adding it again only adds queues).

        ``queues`` are the queues its jobs are enqueued on: ``queues()`` reports them, so a worker
        started without ``-q`` serves them.
        """
        self._resolvers.setdefault(resolver, set()).update(queues)

    def remove_resolver(self, resolver: Resolver) -> None:
        self._resolvers.pop(resolver, None)

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
        autodiscover_modules("jobs")
        self._connect_task_backends()

    def _connect_task_backends(self) -> None:
        """Load the ``TASKS`` backends that are awa's, so that their resolver is here in every
        process (a worker runs ``@task`` jobs without anything else importing the backend)."""
        if not getattr(settings, "TASKS", None):
            return
        if importlib.util.find_spec("django.tasks") is None and importlib.util.find_spec("django_tasks") is None:
            return
        from awa_django.backends import connect_task_backends

        connect_task_backends(self)


registry = Registry()


def job(
    kind: str,
    *,
    queue: str = "default",
    max_attempts: int = 25,
    priority: int = 2,
    takes_context: bool = False,
) -> Callable[[Callable[..., Any]], JobHandler]:
    """Register a handler for ``kind``. ``async def`` runs on the worker's loop, ``def`` in a thread.

    The handler receives the job's args as keyword arguments; with ``takes_context=True`` it also
    receives a ``JobContext`` as its first positional argument.
    """
    from awa_django.managers import build_row

    build_row(kind, queue=queue, max_attempts=max_attempts, priority=priority)  # same rules as enqueue

    def decorator(func: Callable[..., Any]) -> JobHandler:
        return registry.register(
            JobHandler(
                kind,
                func,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                takes_context=takes_context,
            )
        )

    return decorator
