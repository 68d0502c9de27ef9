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

Two sides: ``awa_django.backends.enqueue`` (``AwaBackend``: enqueue, results) and
``awa_django.backends.run`` (``resolve_task``: a task's job run as a handler), over
``awa_django.backends.results`` (the framework's names, and a job row read as a ``TaskResult``).
"""

from __future__ import annotations

from awa_django.backends.enqueue import PRIORITY_STEP as PRIORITY_STEP
from awa_django.backends.enqueue import AwaBackend as AwaBackend
from awa_django.backends.enqueue import connect_task_backends as connect_task_backends
from awa_django.backends.enqueue import head_start as head_start
from awa_django.backends.enqueue import job_priority as job_priority
from awa_django.backends.results import TaskImportError as TaskImportError
from awa_django.backends.run import resolve_task as resolve_task

__all__ = [
    "PRIORITY_STEP",
    "AwaBackend",
    "TaskImportError",
    "connect_task_backends",
    "head_start",
    "job_priority",
    "resolve_task",
]
