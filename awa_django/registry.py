"""``@job`` handlers by kind, autodiscovered from ``<app>/jobs.py``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import autodiscover_modules

from awa_django.exceptions import AwaError

if TYPE_CHECKING:
    from awa_django.models import Job


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


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, JobHandler] = {}

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

    def get(self, kind: str) -> JobHandler | None:
        return self._handlers.get(kind)

    def __contains__(self, kind: object) -> bool:
        return kind in self._handlers

    def __iter__(self) -> Iterator[JobHandler]:
        return iter(list(self._handlers.values()))

    def queues(self) -> set[str]:
        return {h.queue for h in self._handlers.values()}

    def autodiscover(self) -> None:
        autodiscover_modules("jobs")


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
