"""Django's Tasks framework as a front door: every ``@task`` becomes a job that ``awa_worker`` runs.

``TASKS = {"default": {"BACKEND": "awa_django.backends.AwaBackend", "QUEUES": [...]}}``, with
``OPTIONS = {"MAX_ATTEMPTS": n}`` for the attempts a task gets: 1 by default, as the framework's
own backends run a task once (a job's default of 25 is for ``@job`` handlers, written to be
retried), and ``OPTIONS = {"FAIR_KEY": "myapp.tasks.tenant_key"}`` (a dotted path, or the
callable itself) for the jobs' fairness key: called at enqueue as ``FAIR_KEY(task, args, kwargs)``
and returning a str (``""`` is the default key), so no argument name of any task is taken for
it. Without it every task's job has the default key. The framework comes from ``django.tasks``
(Django 6) or else the ``django-tasks`` backport.

A task is enqueued through the job manager's enqueue on Django's connection, in one statement
(its INSERT, as Django's database backend), so it joins the caller's transaction: commit and it
runs, roll back and it never existed; ``task_enqueued`` is sent when the job is committed,
before anything runs it (``AWA["EXECUTION"] = "immediate"`` runs it at that commit too: enqueued,
started, finished, in that order, and the TaskResult ``enqueue`` returned then says how the run
ended, as Django's ImmediateBackend's does; a KeyboardInterrupt that ended it is raised again
there, once its attempt is recorded, as that backend lets it through). The job row is the task's
whole record:

- ``kind`` is the task's module path, ``args`` is ``{"args": [...], "kwargs": {...}}``;
- ``queue`` is ``queue_name``, ``run_at`` is ``run_after``;
- ``priority``: the framework's -100..100 (higher runs sooner) onto our four lanes, 1 (first) …
  4: above 0 → 1, 0 (the default) → 2, -1..-50 → 3, below -50 → 4 (``job_priority``); inside a
  lane, a higher priority is an earlier ``run_at``, ``PRIORITY_STEP`` per point above the
  lane's lowest (``head_start``, taken from the database's now() by the INSERT), so the lane's
  (run_at, id) order keeps the framework's order between tasks enqueued together (in one
  transaction: exactly; otherwise unless the lower one was enqueued more than the difference of
  their head starts earlier). A task with ``run_after`` is never run before it, so it gets no
  head start;
- ``metadata["task"]`` keeps what the row cannot: the backend alias and the exact priority and
  ``run_after``, so that ``TaskResult.task`` is the task as it was enqueued;
- the result id is the job id; states map to READY (scheduled, available, retryable), RUNNING,
  SUCCESSFUL (completed) and FAILED (failed, cancelled). ``worker_ids`` holds one entry per
  attempt (``attempt-1`` …): the row counts attempts, it does not record which worker ran them.

Workers find the task by importing its module path: ``resolve_task`` is a registry resolver,
consulted for kinds no ``@job`` handler has. It wraps the task function in a handler that calls
it with the stored args, gives ``takes_context`` tasks a ``TaskContext`` (attempt = the job's
attempt), and sends ``task_started`` and ``task_finished`` around each attempt (an attempt that
will be retried finishes FAILED; ``get_result`` then says READY until the next one), whatever
ends it: an exception, ``SystemExit``, ``KeyboardInterrupt`` (the worker records those as the
attempt's failure and runs on; immediate mode then raises a KeyboardInterrupt again). Retries,
backoff, heartbeats, deadlines and rescue are the job rules, as for any job. A worker with no
such resolver (started before ``TASKS`` named this backend) fails a task's job as an unknown
kind whose hint says to configure ``TASKS`` and restart (``Registry.unknown_kind_hint``).

Errors follow the framework's: an argument JSON cannot hold raises ``TypeError`` at enqueue; a
return value it cannot hold fails the attempt with ``TypeError`` (``ValueError`` for bytes that
are not UTF-8, as ``normalize_json`` says); a task whose module cannot be imported by the worker
fails with ``ImportError`` naming the module.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import importlib
import inspect
import json
import re
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from datetime import timedelta
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from awa_django.conf import awa_settings
from awa_django.defaults import (
    FAIR_KEY_DEFAULT,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    NAME_MAX_LENGTH,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from awa_django.exceptions import AwaError, InvalidJobError, Snooze, TerminalError
from awa_django.inline import execution_mode, running_inline
from awa_django.jobspec import build_row, fair_key_problem
from awa_django.registry import TASK_METADATA_KEY, JobHandler, Registry, registry
from awa_django.states import JobState
from awa_django.validation import brief
from awa_django.worker.context import JobContext

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
    "AwaBackend",
    "TaskImportError",
    "connect_task_backends",
    "head_start",
    "job_priority",
    "resolve_task",
]

OPTIONS = frozenset({"MAX_ATTEMPTS", "FAIR_KEY"})
TASK_MAX_ATTEMPTS_DEFAULT = 1
"""Attempts a task gets unless ``OPTIONS["MAX_ATTEMPTS"]`` says more: the framework's backends
run a task once, and tasks written for them (Wagtail's among them) expect no retries."""

PRIORITY_STEP = timedelta(milliseconds=10)
"""The head start one point of framework priority gives inside a lane (``head_start``). The
largest, 99 steps in lane 1, stays under the look-behind window (``worker.lanes.LOOK_BEHIND_WINDOW``,
2 s), so a task enqueued behind a lane's cursor is found by the cheap look, and the wait-time
metric of a task counts at most that head start more than it waited."""

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
_INTERRUPT_PATH = f"{KeyboardInterrupt.__module__}.{KeyboardInterrupt.__qualname__}"


class TaskImportError(AwaError, ImportError):
    """A task job's module path no longer leads to a task, so its result cannot be built."""

    def __init__(self, job_id: int, path: str, reason: str) -> None:
        self.job_id = job_id
        self.path = path
        super().__init__(f"job {job_id} runs task {path!r}, which does not import as a task ({reason})")


# Each lane's lowest framework priority: a task's head start counts the points above it.
_LANE_FLOOR = {PRIORITY_MIN: 1, PRIORITY_DEFAULT: 0, PRIORITY_DEFAULT + 1: -50, PRIORITY_MAX: -100}


def job_priority(task_priority: int) -> int:
    """The framework's priority (-100..100, higher sooner) as our lane (1 first … 4 last), in order.

    Any priority above the default runs before default tasks, which get our default (2).
    """
    if task_priority > 0:
        return PRIORITY_MIN
    if task_priority == 0:
        return PRIORITY_DEFAULT
    if task_priority >= -50:
        return PRIORITY_DEFAULT + 1
    return PRIORITY_MAX


def head_start(task_priority: int) -> timedelta:
    """How much earlier than its enqueue a task's ``run_at`` is, inside its lane.

    ``PRIORITY_STEP`` per point above the lane's lowest priority: strictly more for a higher
    priority of the same lane, so that the claim's (priority, run_at, id) order is the framework's
    (-priority, enqueued) order for tasks enqueued together. The default priority (0, a lane of
    its own) and each lane's lowest get none.
    """
    return PRIORITY_STEP * (task_priority - _LANE_FLOOR[job_priority(task_priority)])


class AwaBackend(BaseTaskBackend):
    """A Tasks framework backend whose tasks are awa_django jobs (see the module docstring)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]"
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            raise InvalidTaskBackend(f"{where}['OPTIONS']: unknown option(s) {unknown}; known: {sorted(OPTIONS)}")
        max_attempts = self.options.get("MAX_ATTEMPTS", TASK_MAX_ATTEMPTS_DEFAULT)
        if (
            not isinstance(max_attempts, int)
            or isinstance(max_attempts, bool)
            or not MAX_ATTEMPTS_MIN <= max_attempts <= MAX_ATTEMPTS_MAX
        ):
            raise InvalidTaskBackend(
                f"{where}['OPTIONS']['MAX_ATTEMPTS']={max_attempts!r}: "
                f"must be an integer from {MAX_ATTEMPTS_MIN} to {MAX_ATTEMPTS_MAX}"
            )
        self.max_attempts: int = max_attempts
        self.fair_key: Callable[[Task[Any, Any], list[Any], dict[str, Any]], str] | None = _fair_key_option(
            where, self.options.get("FAIR_KEY")
        )
        for queue in self.queues:
            try:
                build_row("task", queue=queue)  # the queue-name rules of every enqueue
            except InvalidJobError as exc:
                raise InvalidTaskBackend(f"{where}['QUEUES']: {exc}") from None
        registry.add_resolver(resolve_task, queues=self.queues)

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        if len(task.module_path) > NAME_MAX_LENGTH:
            raise InvalidTask(
                f"Task module path {task.module_path!r} is {len(task.module_path)} characters long; "
                f"a job kind holds at most {NAME_MAX_LENGTH}: use a shorter module or function name."
            )

    def enqueue(self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult[Any, Any]:
        """Insert the task's job in the caller's transaction, in one statement; ``task_enqueued``
        follows at commit (at once outside a transaction).

        TypeError (as the framework raises) if an argument cannot be stored as JSON. In immediate
        mode the task runs at that commit, and the TaskResult returned then says how it ended (as
        ``refresh()`` would: outside a transaction, before this returns); a KeyboardInterrupt the
        task raised is raised again there, once its attempt is recorded.
        """
        from awa_django.models import Job

        self.validate_task(task)
        stored = {"args": _json("args", list(args)), "kwargs": _json("kwargs", dict(kwargs))}
        fair_key = self._fair_key_of(task, stored["args"], stored["kwargs"])
        alias = awa_settings().DATABASE_ALIAS
        connection = transaction.get_connection(alias)
        immediate = execution_mode() == "immediate"
        enqueued: list[TaskResult[Any, Any]] = []
        sender = type(self)

        def send_enqueued() -> None:
            if enqueued:  # the insert went through
                task_enqueued.send(sender, task_result=enqueued[0])

        # In immediate mode the insert registers the run as an on_commit callback; task_enqueued is
        # registered before it (callbacks run in order), so it comes first, as in the framework, and
        # outside a transaction this block holds both until its commit. Otherwise nothing runs at
        # commit and no block is needed: the enqueue is the INSERT alone.
        deferred = transaction.atomic(using=alias) if immediate and not connection.in_atomic_block else nullcontext()
        with deferred:
            in_transaction = connection.in_atomic_block
            if in_transaction:
                transaction.on_commit(send_enqueued, using=alias)
            run_after = task.run_after
            job = Job.objects.db_manager(alias)._enqueue(
                task.module_path,
                stored,
                queue=task.queue_name,
                priority=job_priority(task.priority),
                run_at=run_after,
                head_start=head_start(task.priority),  # when run_after is None: before the database's now()
                max_attempts=self.max_attempts,
                fair_key=fair_key,
                metadata={
                    TASK_METADATA_KEY: {
                        "backend": self.alias,
                        "priority": task.priority,
                        "run_after": run_after.isoformat() if run_after is not None else None,
                    }
                },
            )
            result = _task_result(job, task)
            enqueued.append(result)
            if immediate:  # after the run's callback: the result learns how the run ended
                transaction.on_commit(partial(_after_immediate_run, result), using=alias)
        if not in_transaction:
            send_enqueued()  # autocommit: the row is committed
        return result

    def _fair_key_of(self, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> str:
        """``OPTIONS["FAIR_KEY"]`` for this task, checked as every enqueue checks a key: an
        InvalidJobError naming the task and the option if it raises or returns a bad key."""
        if self.fair_key is None:
            return FAIR_KEY_DEFAULT
        where = f"TASKS[{self.alias!r}]['OPTIONS']['FAIR_KEY']"
        try:
            key = self.fair_key(task, list(args), dict(kwargs))
        except Exception as exc:
            raise InvalidJobError(
                "fair_key",
                {"args": args, "kwargs": kwargs},
                f"{where} raised {brief(exc, 200)} for task {task.module_path!r}; fix it (it is called with "
                "the task, its args list and its kwargs dict)",
            ) from None
        problem = fair_key_problem(key)
        if problem is not None:
            raise InvalidJobError("fair_key", key, f"returned by {where} for task {task.module_path!r}: {problem}")
        return str(key)

    async def aenqueue(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[Any, Any]:
        """``enqueue`` on Django's connection in the sync thread, so it joins that transaction."""
        return await sync_to_async(self.enqueue)(task, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        from awa_django.models import Job

        job = _task_jobs().filter(pk=_job_id(result_id)).first()
        if not isinstance(job, Job):
            raise TaskResultDoesNotExist(result_id)
        return _task_result(job)

    async def aget_result(self, result_id: str) -> TaskResult[Any, Any]:
        from awa_django.models import Job

        job = await _task_jobs().filter(pk=_job_id(result_id)).afirst()
        if not isinstance(job, Job):
            raise TaskResultDoesNotExist(result_id)
        return _task_result(job)


def _fair_key_option(where: str, value: object) -> Callable[[Task[Any, Any], list[Any], dict[str, Any]], str] | None:
    """``OPTIONS["FAIR_KEY"]``: None, a callable, or the dotted path of one; InvalidTaskBackend otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise InvalidTaskBackend(
                f"{where}['OPTIONS']['FAIR_KEY']={value!r} does not import ({exc}); give the dotted path of a "
                "callable (task, args, kwargs) -> str"
            ) from None
    if not callable(value):
        raise InvalidTaskBackend(
            f"{where}['OPTIONS']['FAIR_KEY']={value!r}: must be a callable (task, args, kwargs) -> str, "
            "or its dotted path"
        )
    return value


def _json(field: str, value: Any) -> Any:
    """The framework's JSON normalisation (tuples become lists …), with its error types: TypeError
    for a value of a type JSON has no place for, as the framework raises it; InvalidJobError (a
    ValueError, as the framework's for bytes that are not UTF-8) for the rest."""
    try:
        return normalize_json(value)
    except RecursionError:
        raise InvalidJobError(
            field, value, "nests too deep to store as JSON; pass flatter data (see MAX_JSON_DEPTH)"
        ) from None
    except TypeError as exc:
        raise TypeError(
            f"task {field} {value!r} cannot be stored as JSON ({exc}); pass only str, int, float, bool, None, "
            "list, dict"
        ) from None
    except ValueError as exc:
        raise InvalidJobError(
            field, value, f"cannot be stored as JSON ({exc}); pass only str, int, float, bool, None, list, dict"
        ) from None


def _after_immediate_run(result: TaskResult[Any, Any]) -> None:
    """Bring ``result`` up to date once immediate mode ran its task at the commit, as Django's
    ImmediateBackend's result is; then raise the KeyboardInterrupt that ended the attempt, if one
    did (as that backend lets it through), the attempt being recorded on the job by then.

    A task enqueued by a job running in immediate mode runs after that job ends: its result
    still says READY here, and ``refresh()`` tells the rest later.
    """
    try:
        result.refresh()
    except TaskResultDoesNotExist:  # the job row was deleted meanwhile: nothing newer to tell
        return
    interrupted = result.status != TaskResultStatus.SUCCESSFUL and result.attempts and result.errors
    if interrupted and result.errors[-1].exception_class_path == _INTERRUPT_PATH:
        raise KeyboardInterrupt(
            f"task {result.task.module_path} (job {result.id}) was interrupted in immediate mode; its attempt "
            f"is recorded on the job, which is now {result.status}"
        )


def _job_id(result_id: object) -> int:
    try:
        return int(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None


def _task_jobs() -> Any:
    from awa_django.models import Job

    return Job.objects.using(awa_settings().DATABASE_ALIAS).filter(metadata__has_key=TASK_METADATA_KEY)


# --- job row → TaskResult -------------------------------------------------------------


def _task_result(job: Any, task: Task[Any, Any] | None = None) -> TaskResult[Any, Any]:
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
        task = _import_task(job.kind)
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


def _class_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


# --- the worker side: kind → handler ----------------------------------------------------

_handlers: dict[str, JobHandler] = {}
_handlers_lock = threading.Lock()


def connect_task_backends(target: Registry) -> None:
    """Add ``resolve_task`` to ``target`` with the queues of every ``TASKS`` backend that is awa's."""
    for alias, params in task_backends.settings.items():
        try:
            backend_class = import_string(params["BACKEND"])
        except (ImportError, KeyError):
            continue  # the framework reports a broken TASKS entry where it is used
        if isinstance(backend_class, type) and issubclass(backend_class, AwaBackend):
            target.add_resolver(resolve_task, queues=task_backends[alias].queues)


def resolve_task(kind: str) -> JobHandler | None:
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
        task = _import_task(kind)
    except _MissingTaskError as exc:
        return JobHandler(kind, _missing(kind, exc), takes_context=True)
    except Exception as exc:
        return JobHandler(kind, _raising(exc), takes_context=True)
    if task is None:
        return None
    with _handlers_lock:
        return _handlers.setdefault(kind, _task_handler(kind, task))


class _MissingTaskError(ImportError):
    """A module path with no module, or no attribute, there: where a task would be if it existed."""


def _import_task(path: str) -> Task[Any, Any] | None:
    """The Task at ``path``; None if ``path`` leads to something that is not a Task, or is no
    module path at all (its top-level package does not exist: ``emails.send_welcome`` is a job
    kind); _MissingTaskError if, inside a package that exists, its module or attribute does not."""
    module_path, _, name = path.rpartition(".")
    if not module_path or not name.isidentifier() or not all(part.isidentifier() for part in module_path.split(".")):
        return None
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_path == exc.name or module_path.startswith(f"{exc.name}.")):
            if "." not in exc.name:
                return None  # not even its top-level package: a job kind, not a task's path
            raise _MissingTaskError(f"no module named {exc.name!r}") from None
        raise
    if not hasattr(module, name):
        raise _MissingTaskError(f"module {module_path!r} has no attribute {name!r}")
    found = getattr(module, name)
    return found if isinstance(found, Task) else None


def _missing(kind: str, exc: _MissingTaskError) -> Callable[..., Any]:
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
        that are not UTF-8), naming the value and the fix."""
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
            json.dumps(stored, allow_nan=False)
        except ValueError as exc:
            raise ValueError(
                f"the task returned a value that cannot be stored as JSON ({type(value).__name__}: {exc}); {fix}"
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
        error = TaskError(exception_class_path=_class_path(exc), traceback="".join(traceback.format_exception(exc)))
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

    return _task_result(Job.objects.using(awa_settings().DATABASE_ALIAS).get(pk=job_id))


def _load_result_in_thread(job_id: int) -> TaskResult[Any, Any]:
    close_old_connections()
    try:
        return _load_result(job_id)
    finally:
        close_old_connections()


def _task_handler(kind: str, task: Task[Any, Any]) -> JobHandler:
    # The wrappers take the job's args ({"args", "kwargs"}) so that the executor's signature check
    # passes; they call the task with the stored arguments as the TaskResult (the row) has them.
    signature = inspect.signature(task.func)

    if inspect.iscoroutinefunction(task.func):

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

        return JobHandler(kind, run_async, queue=task.queue_name, takes_context=True)

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

    return JobHandler(kind, run_sync, queue=task.queue_name, takes_context=True)
