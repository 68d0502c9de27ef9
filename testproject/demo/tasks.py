"""Demo tasks for Django's Tasks framework: run by awa_worker through awa_django.backends.AwaBackend.

``add.enqueue(2, 3)`` inserts a job (in the caller's transaction); once a worker has run it,
``add.get_result(result.id).return_value == 5``.
"""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django < 6: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef, unused-ignore]


@task()
def add(a: int, b: int) -> int:
    return a + b
