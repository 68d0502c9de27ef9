"""A database router that keeps awa_django's models on the jobs' database.

Add it when the project has more than one database::

    DATABASE_ROUTERS = ["awa_django.routers.AwaRouter"]   # first, or before any catch-all router
    AWA = {"DATABASE_ALIAS": "jobs"}

Reads, writes and migrations of the ``awa`` app then go to ``AWA["DATABASE_ALIAS"]`` (read at
each call, so ``override_settings`` works), which is where the worker, the services and the
enqueue API already work; so the admin, ``Job.objects`` and the worker agree on where the jobs
are. The app's tables are created only on that alias (``migrate --database other`` skips them),
so the other databases may be SQLite, MySQL or anything Django supports. For any other app the
router has no opinion (returns None), and the next router or Django's default decides.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from awa_django.conf import awa_settings

APP_LABEL = "awa"


def _is_awa(model: type[Model] | Model) -> bool:
    return model._meta.app_label == APP_LABEL


class AwaRouter:
    """Routes the ``awa`` app to ``AWA["DATABASE_ALIAS"]``; says nothing about other apps."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return awa_settings().DATABASE_ALIAS if _is_awa(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return awa_settings().DATABASE_ALIAS if _is_awa(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        """Two awa objects may relate (they live together); one awa object and one from another
        app only when both are on the jobs' database (Django cannot join across databases)."""
        if _is_awa(obj1) and _is_awa(obj2):
            return True
        if _is_awa(obj1) or _is_awa(obj2):
            return obj1._state.db == obj2._state.db
        return None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        if app_label == APP_LABEL:
            return db == awa_settings().DATABASE_ALIAS
        return None
