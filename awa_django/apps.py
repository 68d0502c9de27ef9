from __future__ import annotations

import importlib.util

from django.apps import AppConfig
from django.conf import settings


class AwaConfig(AppConfig):
    name = "awa_django"
    label = "awa"
    verbose_name = "Awa job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from awa_django import checks  # noqa: F401  (registers the system checks)
        from awa_django.registry import registry

        registry.autodiscover()
        if _uses_task_framework():
            # Here rather than in the registry, so the registry never imports the backend (which
            # imports the registry): every process, a worker included, gets the resolver of
            # ``@task`` jobs without anything else importing the backend.
            from awa_django.backends import connect_task_backends

            connect_task_backends(registry)


def _uses_task_framework() -> bool:
    """``TASKS`` is set and Django's Tasks framework (Django 6, or the django-tasks backport) is installed."""
    if not getattr(settings, "TASKS", None):
        return False
    return importlib.util.find_spec("django.tasks") is not None or importlib.util.find_spec("django_tasks") is not None
