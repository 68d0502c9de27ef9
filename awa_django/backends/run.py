"""The Tasks backend's worker side: a kind that is a task's module path, resolved to a handler
(``resolve_task``, a registry resolver) that runs the task with its stored arguments and sends
``task_started`` / ``task_finished`` around each attempt. Used wherever jobs run (a worker,
immediate mode, ``run_jobs``), and by the enqueue warnings, which ask whether a kind has a handler."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import close_old_connections
from django.utils import timezone

from awa_django.backends.results import (
    MissingTaskError,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    class_path,
    import_task,
    normalize_json,
    task_finished,
    task_result,
    task_started,
)
from awa_django.conf import awa_settings
from awa_django.context import JobContext
from awa_django.exceptions import Snooze, TerminalError
from awa_django.handlers import TASK_METADATA_KEY, Handler
from awa_django.inline import running_inline
from awa_django.storable import find_problem
from awa_django.validation import UnstorableValueError, storable_json

_handlers: dict[str, Handler] = {}
_handlers_lock = threading.Lock()


def resolve_task(kind: str) -> Handler | None:
    """The handler running the task at module path ``kind``, or None if ``kind`` is not a task's.

    A module that exists but fails to import gives a handler that raises its error, so the job
    retries with backoff (a deploy in progress) and keeps the real traceback when it fails. A
    path into a package that exists whose module (or attribute) is not there (code not deployed
    to this worker, a renamed task) gives a handler that fails a task's job with ImportError
    naming it, and any other job as the unknown kind it is (a job kind may be dotted too: only a
    task's job carries the task metadata).
    """
    handler = _handlers.get(kind)
    if handler is not None:
        return handler
    try:
        task = import_task(kind)
    except MissingTaskError as exc:
        return Handler(kind, _missing(kind, exc), takes_context=True)
    except Exception as exc:
        return Handler(kind, _raising(exc), takes_context=True)
    if task is None:
        return None
    with _handlers_lock:
        return _handlers.setdefault(kind, _task_handler(kind, task))


def _missing(kind: str, exc: MissingTaskError) -> Callable[..., Any]:
    module_path = kind.rpartition(".")[0]

    def fail(context: JobContext, **_args: Any) -> None:
        if TASK_METADATA_KEY in (context.job.metadata or {}):
            raise ImportError(
                f"task {kind!r} cannot be imported from module {module_path!r} ({exc}); deploy the code that "
                "defines it to the workers, or cancel its jobs if the task was removed"
            )
        raise TerminalError(
            f"no handler registered for kind {kind!r}; register one with @job({kind!r}) in an installed app's "
            f"jobs.py (nor is it a Tasks framework task: {exc})"
        )

    fail.awa_unresolved = True  # type: ignore[attr-defined]  # notices: a kind nothing runs
    return fail


def _raising(exc: Exception) -> Callable[..., Any]:
    def fail(context: JobContext, **_args: Any) -> None:
        raise exc

    return fail


class _Attempt:
    """One attempt of a task: its call, and the TaskResults the signals carry."""

    def __init__(self, task: Task[Any, Any], signature: inspect.Signature, started: TaskResult[Any, Any]) -> None:
        self.task = task
        self.signature = signature
        self.started = started
        self.sender = type(started.task.get_backend())

    def call_args(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The task's positional and keyword arguments; TerminalError if they cannot fit it."""
        args: tuple[Any, ...] = tuple(self.started.args)
        if self.task.takes_context:
            args = (TaskContext(task_result=self.started), *args)
        try:
            self.signature.bind(*args, **self.started.kwargs)
        except TypeError as exc:
            raise TerminalError(
                f"args {self.started.args!r} and kwargs {self.started.kwargs!r} do not match task "
                f"{self.task.module_path}{self.signature}: {exc}"
            ) from None
        return args, self.started.kwargs

    def succeeded(self, value: Any) -> tuple[Any, TaskResult[Any, Any]]:
        """The value to store and the finished result. As the framework's backends do, a value
        JSON cannot hold fails the attempt: TypeError (ValueError for NaN, infinities, bytes
        that are not UTF-8, and what Postgres' jsonb refuses: a NUL, a lone surrogate, a value
        past its size), naming the value and the fix."""
        fix = "return None or JSON-serialisable data (str, int, float, bool, None, list, dict)"
        try:
            stored = normalize_json(value)
        except TypeError as exc:
            raise TypeError(f"the task returned a value that cannot be stored as JSON ({exc}); {fix}") from None
        except (ValueError, RecursionError) as exc:
            raise ValueError(
                f"the task returned a value that cannot be stored as JSON ({type(value).__name__}: {exc}); {fix}"
            ) from None
        try:
            storable_json(stored)  # what the row takes: no NaN, and no NUL or lone surrogate for jsonb
        except UnstorableValueError as exc:
            # Refused here, not by the executor after task_finished said SUCCESSFUL: the signal and
            # the row both say FAILED, with this ValueError.
            where = find_problem(stored, "the task's return value")
            raise ValueError(
                f"the task returned a value that cannot be stored as JSON ({type(value).__name__}: {exc.reason})"
                f"{'; ' + where if where else ''}; {fix}"
            ) from None
        finished = dataclasses.replace(self.started, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now())
        object.__setattr__(finished, "_return_value", stored)
        return stored, finished

    def ended(self, exc: BaseException) -> TaskResult[Any, Any]:
        """The result an attempt that raised ``exc`` finishes with. READY when it is not over:
        snoozed, or handed back by the stopping worker (``asyncio.CancelledError`` of the
        worker's own cancellation); FAILED otherwise, ``SystemExit`` and ``KeyboardInterrupt``
        included (the attempt's failure, with their traceback)."""
        if isinstance(exc, Snooze) or _handed_back(exc):
            return dataclasses.replace(self.started, status=TaskResultStatus.READY)
        error = TaskError(exception_class_path=class_path(exc), traceback="".join(traceback.format_exception(exc)))
        return dataclasses.replace(
            self.started,
            status=TaskResultStatus.FAILED,
            finished_at=timezone.now(),
            errors=[*self.started.errors, error],
        )


def _handed_back(exc: BaseException) -> bool:
    """The worker cancelled this attempt itself (stopping): it runs again, it did not fail."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        current = asyncio.current_task()
    except RuntimeError:  # no running loop: a sync handler's thread
        return False
    return current is not None and current.cancelling() > 0


def _load_result(job_id: int) -> TaskResult[Any, Any]:
    from awa_django.models import Job

    return task_result(Job.objects.using(awa_settings().DATABASE_ALIAS).get(pk=job_id))


def _load_result_in_thread(job_id: int) -> TaskResult[Any, Any]:
    close_old_connections()
    try:
        return _load_result(job_id)
    finally:
        close_old_connections()


def _task_handler(kind: str, task: Task[Any, Any]) -> Handler:
    # The wrappers take the job's args ({"args", "kwargs"}) so that the executor's signature check
    # passes; they call the task with the stored arguments as the TaskResult (the row) has them.
    signature = inspect.signature(task.func)

    if iscoroutinefunction(task.func):

        async def run_async(
            context: JobContext, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None
        ) -> Any:
            if running_inline():  # run_jobs / immediate mode: read on the caller's connection and transaction
                started = await sync_to_async(_load_result)(context.job_id)
            else:
                started = await sync_to_async(_load_result_in_thread, thread_sensitive=False)(context.job_id)
            attempt = _Attempt(task, signature, started)
            await task_started.asend(attempt.sender, task_result=started)
            try:
                call_args, call_kwargs = attempt.call_args()
                stored, finished = attempt.succeeded(await task.func(*call_args, **call_kwargs))
            except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the attempt still finishes
                await task_finished.asend(attempt.sender, task_result=attempt.ended(exc))
                raise
            await task_finished.asend(attempt.sender, task_result=finished)
            return stored

        return Handler(kind, run_async, queue=task.queue_name, takes_context=True)

    def run_sync(context: JobContext, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> Any:
        started = _load_result(context.job_id)  # in the worker's thread pool
        attempt = _Attempt(task, signature, started)
        task_started.send(attempt.sender, task_result=started)
        try:
            call_args, call_kwargs = attempt.call_args()
            stored, finished = attempt.succeeded(task.func(*call_args, **call_kwargs))
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the attempt still finishes
            task_finished.send(attempt.sender, task_result=attempt.ended(exc))
            raise
        task_finished.send(attempt.sender, task_result=finished)
        return stored

    return Handler(kind, run_sync, queue=task.queue_name, takes_context=True)
