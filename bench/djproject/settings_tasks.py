"""django-tasks-db under benchmark: its app plus the bench tasks (bench.djproject.tasksbench)."""

from importlib.util import find_spec

from bench.djproject.base_settings import *  # noqa: F403

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_tasks_db",
    "bench.djproject.tasksbench",
]
if find_spec("django.tasks") is None:  # Django < 6: the django-tasks backport
    INSTALLED_APPS.insert(2, "django_tasks")

TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["default", "bench", "A", "B"],
    }
}
