"""Django's Tasks framework as this package reads it (``django.tasks`` on Django 6, else the
``django-tasks`` backport), and a task's job row read as its ``TaskResult``: what the enqueue side
(``awa_django.backends.enqueue``: ``enqueue``, ``get_result``) and the worker side
(``awa_django.backends.run``: the results a running task's signals carry) both return."""

from __future__ import annotations

import builtins
import importlib
import re
from collections.abc import Mapping
from typing import Any

from django.utils.dateparse import parse_datetime

from awa_django.exceptions import AwaError
from awa_django.handlers import TASK_METADATA_KEY
from awa_django.states import JobState

try:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django < 6: the django-tasks backport
    from django_tasks import task_backends  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.base import (  # type: ignore[assignment, no-redef, unused-ignore]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.utils import normalize_json  # type: ignore[assignment, no-redef, unused-ignore]

__all__ = [
    "INTERRUPT_PATH",
    "STATUS_BY_STATE",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "MissingTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskImportError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "class_path",
    "import_task",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_result",
    "task_started",
]

STATUS_BY_STATE = {
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.AVAILABLE: TaskResultStatus.READY,
    JobState.RETRYABLE: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}

# An error entry's text starts with the exception's name when an exception caused it
# ("ValueError: boom", "myapp.errors.GatewayError: …"); worker-side failures read otherwise.
_EXCEPTION_NAME = re.compile(r"([A-Za-z_][\w.]*)(?=: |$)")
_WORKER_ERROR_PATH = f"{AwaError.__module__}.{AwaError.__qualname__}"
INTERRUPT_PATH = f"{KeyboardInterrupt.__module__}.{KeyboardInterrupt.__qualname__}"


class TaskImportError(AwaError, ImportError):
    """A task job's module path no longer leads to a task, so its result cannot be built."""

    def __init__(self, job_id: int, path: str, reason: str) -> None:
        self.job_id = job_id
        self.path = path
        super().__init__(f"job {job_id} runs task {path!r}, which does not import as a task ({reason})")


# --- job row → TaskResult -------------------------------------------------------------


def task_result(job: Any, task: Task[Any, Any] | None = None) -> TaskResult[Any, Any]:
    """The TaskResult a job row describes (``task`` when the caller already has it)."""
    info = job.metadata.get(TASK_METADATA_KEY) if isinstance(job.metadata, dict) else None
    info = info if isinstance(info, dict) else {}
    if task is None:
        task = _enqueued_task(job, info)
    args = job.args if isinstance(job.args, dict) else {}
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.pk),
        status=STATUS_BY_STATE[job.state],
        enqueued_at=job.created_at,
        started_at=job.attempted_at,
        finished_at=job.finalized_at,
        last_attempted_at=job.attempted_at,
        args=list(args.get("args") or []),
        kwargs=dict(args.get("kwargs") or {}),
        backend=str(info.get("backend") or task.backend),
        errors=[_task_error(entry) for entry in job.errors or [] if isinstance(entry, dict)],
        worker_ids=[f"attempt-{n}" for n in range(1, job.attempt + 1)],
    )
    if job.state == JobState.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _enqueued_task(job: Any, info: dict[str, Any]) -> Task[Any, Any]:
    try:
        task = import_task(job.kind)
    except Exception as exc:
        raise TaskImportError(job.pk, job.kind, f"{type(exc).__name__}: {exc}") from exc
    if task is None:
        raise TaskImportError(job.pk, job.kind, "no task object at that path")
    run_after = info.get("run_after")
    priority = info.get("priority")
    return task.using(
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        queue_name=job.queue,
        run_after=parse_datetime(run_after) if isinstance(run_after, str) else None,
        backend=info.get("backend") or None,
    )


def _task_error(entry: Mapping[str, Any]) -> TaskError:
    """An error entry as the framework's TaskError: the exception's class path and its traceback.

    Entries of worker-side failures (no handler, a deadline, a cancel) name no exception class of
    the task's: their path is AwaError's, and their text is kept in the traceback.
    """
    error = str(entry.get("error") or "")
    trace = str(entry.get("traceback") or "")
    path = entry.get("exception")
    if not isinstance(path, str) or not path:
        path = _exception_path(error)
        if path is None:
            lines = trace.rstrip().splitlines()
            path = (_exception_path(lines[-1]) if lines else None) or _WORKER_ERROR_PATH
            trace = f"{trace}\n{error}" if trace else error
    return TaskError(exception_class_path=path, traceback=trace or error)


def _exception_path(text: str) -> str | None:
    """``module.Class`` of the exception a describe()d error text starts with, if it does."""
    match = _EXCEPTION_NAME.match(text)
    if match is None:
        return None
    name = match.group(1)
    if "." in name:
        return name
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{name}"
    return None


def class_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


class MissingTaskError(ImportError):
    """A module path with no module, or no attribute, there: where a task would be if it existed."""


def import_task(path: str) -> Task[Any, Any] | None:
    """The Task at ``path``; None if ``path`` leads to something that is not a Task, or is no
    module path at all (its top-level package does not exist: ``emails.send_welcome`` is a job
    kind); MissingTaskError if, inside a package that exists, its module or attribute does not."""
    module_path, _, name = path.rpartition(".")
    if not module_path or not name.isidentifier() or not all(part.isidentifier() for part in module_path.split(".")):
        return None
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_path == exc.name or module_path.startswith(f"{exc.name}.")):
            if "." not in exc.name:
                return None  # not even its top-level package: a job kind, not a task's path
            raise MissingTaskError(f"no module named {exc.name!r}") from None
        raise
    if not hasattr(module, name):
        raise MissingTaskError(f"module {module_path!r} has no attribute {name!r}")
    found = getattr(module, name)
    return found if isinstance(found, Task) else None
