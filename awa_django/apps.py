from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from django.apps import AppConfig
from django.conf import settings
from django.utils.module_loading import import_string


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
    """Django's Tasks framework is installed (Django 6, or the django-tasks backport) and one of the
    ``TASKS`` backends is awa's. Django 6 sets ``TASKS`` by default (its immediate backend), so a
    project that only has the framework does not load awa's backend, nor the worker code it needs."""
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, Mapping) or not tasks:
        return False
    if importlib.util.find_spec("django.tasks") is None and importlib.util.find_spec("django_tasks") is None:
        return False
    return any(_is_awa_backend(params) for params in tasks.values())


def _is_awa_backend(params: object) -> bool:
    """The ``TASKS`` entry's BACKEND is ``AwaBackend`` or a subclass (told by the class's MRO, so
    that the check itself imports only the configured class: a subclass has imported ours)."""
    path = params.get("BACKEND") if isinstance(params, Mapping) else None
    if not isinstance(path, str):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # the framework reports a broken TASKS entry where it is used
    mro = getattr(backend, "__mro__", ())
    # Where the class is defined (``awa_django.backends`` re-exports it under the documented path).
    return any(f"{cls.__module__}.{cls.__qualname__}" == "awa_django.backends.enqueue.AwaBackend" for cls in mro)
