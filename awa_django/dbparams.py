"""How awa connects to the jobs' database outside Django's ORM: psycopg keyword arguments built
from a Django database alias. A contract module: the worker's connections (worker/db.py), the
system checks and a workflow's waiter (workflows/waiting.py) all build theirs here, so a process
that only serves the admin or runs ``manage.py check`` loads no ``awa_django.worker`` module."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from django.db import connections
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.types.json import set_json_loads

from awa_django.conf import awa_settings
from awa_django.storable import read_json

_MICROSECOND = timedelta(microseconds=1)


class ExactIntervalDumper(Dumper):
    """A timedelta as an exact count of microseconds (``86400000000 microseconds``), where psycopg
    writes ``1 day``. Postgres adds an interval's days in the session's time zone, so across a
    DST change a day is 23 or 25 hours; the worker's durations (retentions, deadlines, staleness,
    aging) are exact, whatever the server's time zone."""

    oid = psycopg.postgres.types["interval"].oid

    def dump(self, obj: timedelta) -> bytes:
        return b"%d microseconds" % (obj // _MICROSECOND)


# psycopg's adapters, with the worker's durations exact: the context of every connection awa
# opens itself (connection_kwargs).
EXACT_DURATIONS = AdaptersMap(psycopg.adapters)
EXACT_DURATIONS.register_dumper(timedelta, ExactIntervalDumper)
# And json / jsonb read by storable.read_json: a value nested past Python's recursion limit is an
# UnreadableJson for its own job to fail on, not a RecursionError that fails the whole claim.
set_json_loads(read_json, EXACT_DURATIONS)


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
    # OPTIONS["assume_role"]: Django runs SET ROLE on each connection it opens, and its connection
    # params leave the option out; these connections take the role at startup (libpq's options).
    role = connection.settings_dict.get("OPTIONS", {}).get("assume_role")
    if role:
        escaped = str(role).replace("\\", "\\\\").replace(" ", "\\ ")
        params["options"] = f"{params.get('options') or ''} -c role={escaped}".strip()
    params["autocommit"] = True
    params.setdefault("application_name", "awa_worker")
    params["context"] = EXACT_DURATIONS
    return params


LISTEN_PURPOSE = "listen"


def listen_kwargs(alias_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Options for the direct LISTEN connection: the URL names the server, database and user; only
    the session options (autocommit, application_name, prepare_threshold) come from the alias."""
    keep = ("autocommit", "application_name", "prepare_threshold")
    return {key: alias_kwargs[key] for key in keep if key in alias_kwargs}


def execute_prepared(alias: str, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement on Django's connection (so in the caller's transaction) and return its row.

    Django's cursors bind parameters on the client and never prepare, so the server parses and
    plans the whole text every time. Enqueue and an atomic attempt's completion are hot enough for
    a server-side prepared statement to matter (~1.3x jobs/s for enqueue, 0.18 to 0.23 of the plain
    drain for atomic no-op handlers: bench/README.md). So, unless Django is recording queries
    (DEBUG, tests counting queries) or someone installed an execute wrapper, this runs on a psycopg
    server-binding cursor over the same connection, prepared, with the same checks and error
    translation as Django's cursor. AWA["PREPARED_STATEMENTS"] = False, or AWA["POOLER"] =
    "transaction" with PREPARED_STATEMENTS unset, turns it off (a transaction pooler hands each
    transaction a different server session, where the prepared statement does not exist).
    """
    connection = connections[alias]
    if connection.queries_logged or connection.execute_wrappers or not awa_settings().use_prepared_statements:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()  # type: ignore[no-any-return]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off on its connections (psycopg then ignores prepare=True too).
        # Its own cursors bind on the client and never prepare, so a threshold no query reaches
        # lets explicit prepares through and changes nothing else; with server-side binding
        # configured, Django's queries would start preparing, so leave the connection alone.
        if not issubclass(raw.cursor_factory, psycopg.ClientCursor):
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()  # type: ignore[no-any-return]
        raw.prepare_threshold = 2**31 - 1
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()
