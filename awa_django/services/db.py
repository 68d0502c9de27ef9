"""The services' database: the alias they use (``AWA['DATABASE_ALIAS']``, read at each call so
``override_settings`` works) and the NOTIFY they send in their transaction."""

from __future__ import annotations

from typing import Any

from django.db import connections

from awa_django.conf import awa_settings


def database_alias() -> str:
    return awa_settings().DATABASE_ALIAS


def notify(sql: str, params: dict[str, Any]) -> None:
    """Run a ``notify_*`` statement: Postgres delivers it when the caller's transaction commits."""
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(sql, params)
