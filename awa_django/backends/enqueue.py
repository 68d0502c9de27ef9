"""The Tasks backend's enqueue side: ``AwaBackend``, which a ``TASKS`` entry names, turns a task's
enqueue into a job row in the caller's transaction and reads its result back; and the wiring of
the worker side (``awa_django.backends.run``) into the registry, for every process that has an
awa backend configured. See ``awa_django.backends`` for how a task maps onto a job."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from datetime import timedelta
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils.module_loading import import_string

from awa_django.backends.results import (
    INTERRUPT_PATH,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_result,
)
from awa_django.backends.run import resolve_task
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
from awa_django.exceptions import InvalidJobError
from awa_django.handlers import TASK_METADATA_KEY, Registry, registry
from awa_django.inline import execution_mode
from awa_django.jobspec import build_row, fair_key_problem
from awa_django.validation import brief

OPTIONS = frozenset({"MAX_ATTEMPTS", "FAIR_KEY"})
TASK_MAX_ATTEMPTS_DEFAULT = 1
"""Attempts a task gets unless ``OPTIONS["MAX_ATTEMPTS"]`` says more: the framework's backends
run a task once, and tasks written for them (Wagtail's among them) expect no retries."""

PRIORITY_STEP = timedelta(milliseconds=10)
"""The head start one point of framework priority gives inside a lane (``head_start``). The
largest, 99 steps in lane 1, stays under the look-behind window (``worker.lanes.LOOK_BEHIND_WINDOW``,
2 s), so a task enqueued behind a lane's cursor is found by the cheap look, and the wait-time
metric of a task counts at most that head start more than it waited."""

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
            result = task_result(job, task)
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
        return task_result(job)

    async def aget_result(self, result_id: str) -> TaskResult[Any, Any]:
        from awa_django.models import Job

        job = await _task_jobs().filter(pk=_job_id(result_id)).afirst()
        if not isinstance(job, Job):
            raise TaskResultDoesNotExist(result_id)
        return task_result(job)


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
    if interrupted and result.errors[-1].exception_class_path == INTERRUPT_PATH:
        raise KeyboardInterrupt(
            f"task {result.task.module_path} (job {result.id}) was interrupted in immediate mode; its attempt "
            f"is recorded on the job, which is now {result.status}"
        )


def _job_id(result_id: object) -> int:
    """The job id a result id names: its decimal digits exactly, as ``str(job.id)`` wrote them
    (``int()`` would also read " 5", "1_0" or a full-width digit as ids 5, 10 and 5)."""
    text = str(result_id)
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        raise TaskResultDoesNotExist(result_id)
    return int(text)


def _task_jobs() -> Any:
    from awa_django.models import Job

    return Job.objects.using(awa_settings().DATABASE_ALIAS).filter(metadata__has_key=TASK_METADATA_KEY)


def connect_task_backends(target: Registry) -> None:
    """Add ``resolve_task`` to ``target`` with the queues of every ``TASKS`` backend that is awa's."""
    for alias, params in task_backends.settings.items():
        try:
            backend_class = import_string(params["BACKEND"])
        except (ImportError, KeyError):
            continue  # the framework reports a broken TASKS entry where it is used
        if isinstance(backend_class, type) and issubclass(backend_class, AwaBackend):
            target.add_resolver(resolve_task, queues=task_backends[alias].queues)
