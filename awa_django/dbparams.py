"""How awa connects to the jobs' database outside Django's ORM: psycopg keyword arguments built
from a Django database alias. A contract module: the worker's connections (worker/db.py), the
system checks and a workflow's waiter (workflows/waiting.py) all build theirs here, so a process
that only serves the admin or runs ``manage.py check`` loads no ``awa_django.worker`` module."""

from __future__ import annotations

from typing import Any

from django.db import connections

from awa_django.conf import awa_settings


def connection_kwargs(alias: str) -> dict[str, Any]:
    """psycopg.connect() keyword arguments for a Django database alias."""
    connection = connections[alias]
    params = dict(connection.get_connection_params())
    for key in ("cursor_factory", "context"):
        params.pop(key, None)
    # Django turns server-side prepared statements off for the sake of poolers; the worker's hot
    # statements gain from them, so keep psycopg's default unless OPTIONS asks otherwise, or the
    # settings say a transaction pooler stands in between (a statement prepared in one server
    # session does not exist in the next: "prepared statement "_pg3_0" does not exist").
    if not awa_settings().use_prepared_statements:
        params["prepare_threshold"] = None
    elif "prepare_threshold" not in connection.settings_dict.get("OPTIONS", {}):
        params.pop("prepare_threshold", None)
    params["autocommit"] = True
    params.setdefault("application_name", "awa_worker")
    return params


LISTEN_PURPOSE = "listen"


def listen_kwargs(alias_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Options for the direct LISTEN connection: the URL names the server, database and user; only
    the session options (autocommit, application_name, prepare_threshold) come from the alias."""
    keep = ("autocommit", "application_name", "prepare_threshold")
    return {key: alias_kwargs[key] for key in keep if key in alias_kwargs}
