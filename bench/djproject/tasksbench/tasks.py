"""The bench tasks for django-tasks-db (Django's Tasks API; the backport on Django < 6)."""

from __future__ import annotations

import time

try:
    from django.tasks import task
except ImportError:  # Django < 6
    from django_tasks import task

from bench import handlerlog


@task(queue_name="bench")
def noop(seq: int, q: str = "bench") -> None:
    handlerlog.start(seq, q)
    handlerlog.end(seq, q)


@task(queue_name="bench")
def sleep(seq: int, ms: int, q: str = "bench") -> None:
    handlerlog.start(seq, q)
    time.sleep(ms / 1000)
    handlerlog.end(seq, q)
