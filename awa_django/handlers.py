"""Handlers by kind: the ``Registry`` that maps a job's kind to the function that runs it, and
each kind's rules (``Handler``): what the enqueue API reads for its defaults and the worker reads
to run a job. ``@job`` (``awa_django.registry``) fills it; ``<app>/jobs.py`` modules are
autodiscovered into it.

A kind with no ``@job`` handler may still be run: ``Registry.get`` then asks the registered
resolvers, in the order they were added, for a handler. The Tasks framework backend
(``awa_django.backends``) adds one that turns a ``@task``'s module path into a handler.

Below the models and the enqueue API: nothing here names a model, a manager or the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.utils.module_loading import autodiscover_modules

from awa_django.arguments import ArgsCheck
from awa_django.defaults import MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT, QUEUE_DEFAULT
from awa_django.exceptions import AwaError
from awa_django.jobspec import FairKeyRule
from awa_django.retry import DEFAULT_POLICY, RetryPolicy

logger = logging.getLogger("awa_django.registry")

TASK_METADATA_KEY = "task"
"""The ``metadata`` key that marks a job the Tasks framework backend wrote (``awa_django.backends``);
here so that the unknown-kind hint (``Registry.unknown_kind_hint``) can tell a task's job apart."""
TASKS_BACKEND_PATH = "awa_django.backends.AwaBackend"


class RegistryError(AwaError):
    pass


@dataclass(eq=False)
class Handler:
    """A registered handler: its function and its kind's rules. Calling it calls the function.

    What the enqueue API and the worker read of a kind: ``queue``, ``max_attempts`` and
    ``priority`` are what an enqueue that leaves them out gets; ``timeout`` (seconds) overrides the
    queue's deadline for this kind; ``retry`` holds its ``retry_on`` / ``discard_on`` / ``backoff``
    rules; ``fair_key`` is how its jobs get a fairness key when the enqueue names none (a constant,
    or a callable of the args dict). ``atomic`` runs a ``def`` handler inside
    ``transaction.atomic()`` on the jobs' database with its completion written in that transaction
    (``awa_django.worker.atomic``). ``@job`` returns a ``JobHandler`` (``awa_django.registry``),
    which adds ``.enqueue`` / ``.aenqueue`` / ``.using``.
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
        self.is_async = iscoroutinefunction(self.func)
        check_atomic(self.kind, self.func, self.atomic, is_async=self.is_async)
        try:
            self.args_check = ArgsCheck.of(self.func, takes_context=self.takes_context)
        except (TypeError, ValueError):
            self.args_check = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


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


Resolver = Callable[[str], Handler | None]
"""Given a kind that has no registered handler, return a handler for it, or None if not its kind."""


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._resolvers: dict[Resolver, set[str]] = {}  # resolver -> the queues its jobs use

    def register(self, handler: Handler) -> Handler:
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

    def registered(self, kind: str) -> Handler | None:
        """The ``@job`` handler registered for ``kind``, or None (resolvers are not asked)."""
        return self._handlers.get(kind)

    def get(self, kind: str) -> Handler | None:
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

    def __iter__(self) -> Iterator[Handler]:
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
