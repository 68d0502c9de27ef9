"""The worker's own connections (psycopg, built from the Django alias) act as the role Django's do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from awa_django.dbparams import connection_kwargs
from tests.harness import run_on_worker_connection

ROLE = "awa test assumed"  # a space: the role reaches libpq's options escaped


@pytest.fixture
def assumed_role(transactional_db: None) -> Iterator[str]:
    """OPTIONS["assume_role"] on the default alias (Django runs SET ROLE on each connection it opens)."""
    with connection.cursor() as cursor:
        cursor.execute(f'DROP ROLE IF EXISTS "{ROLE}"')
        cursor.execute(f'CREATE ROLE "{ROLE}" NOLOGIN')
    options = connection.settings_dict["OPTIONS"]
    options["assume_role"] = ROLE
    connection.close()
    try:
        yield ROLE
    finally:
        options.pop("assume_role", None)
        for conn in connections.all():
            conn.close()
        with connection.cursor() as cursor:
            cursor.execute(f'DROP ROLE IF EXISTS "{ROLE}"')


def test_worker_connections__assume_role__the_same_role_as_django(assumed_role: str) -> None:
    """Django 5+ OPTIONS["assume_role"] runs every ORM statement as that role; the worker, the
    checks and the durable waits connect with psycopg from the same alias, and Django's
    get_connection_params drops the option (Django applies it itself, with SET ROLE). Before, the
    worker's claims, writes and the leader's partitions ran as the login role: permission denied
    where only the assumed role holds the grants, or partitions owned by another role than the
    migrated tables."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone() == (assumed_role,)  # Django's own connection

    async def current_user(conn: psycopg.AsyncConnection[Any]) -> str:
        cursor = await conn.execute("SELECT current_user")
        return str(await cursor.fetchone())

    assert run_on_worker_connection(current_user) == str((assumed_role,))
    with psycopg.connect(**connection_kwargs("default")) as sync_conn:  # the pooler check's connections
        assert sync_conn.execute("SELECT current_user").fetchone() == (assumed_role,)
