"""The Tasks framework the backend runs on: ``django.tasks`` (Django 6) or the django-tasks backport."""

from __future__ import annotations

try:
    from django.tasks import TaskResultStatus, task, task_backends
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django < 6
    from django_tasks import TaskResultStatus, task, task_backends  # type: ignore[no-redef, assignment]
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend  # type: ignore[no-redef, assignment]
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef, assignment]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef, assignment]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[no-redef, assignment]

__all__ = [
    "InvalidTask",
    "InvalidTaskBackend",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
