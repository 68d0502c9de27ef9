"""awa.W010: atomic handlers whose project writes some models to another database than the jobs'; awa.W011:
atomic handlers whose workers would connect for every attempt (CONN_MAX_AGE 0)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db.models import Model
from django.test import override_settings

from awa_django.checks import check_atomic_connections, check_atomic_databases
from awa_django.registry import JobHandler, registry

ROUTER = "awa_django.routers.AwaRouter"
ELSEWHERE = "tests.test_checks_atomic.DemoElsewhere"

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")


class DemoElsewhere:
    """Sends the demo app's writes to the 'shop' database; no opinion on anything else."""

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return "shop" if model._meta.app_label == "demo" else None


def charge() -> None: ...


@pytest.fixture
def atomic_kind() -> Iterator[str]:
    registry.register(JobHandler("checks.atomic_charge", charge, atomic=True))
    try:
        yield "checks.atomic_charge"
    finally:
        registry.unregister("checks.atomic_charge")


def test_check_atomic_databases__models_written_elsewhere__w010_names_handlers_models_and_fix(
    atomic_kind: str,
) -> None:
    with override_settings(DATABASE_ROUTERS=[ELSEWHERE, ROUTER]):
        (message,) = check_atomic_databases()
    assert message.id == "awa.W010"
    assert repr(atomic_kind) in message.msg
    assert "'default'" in message.msg  # the jobs' database
    assert "'shop': demo.Execution" in message.msg
    assert "DATABASE_ROUTERS" in str(message.hint)
    assert "AWA['DATABASE_ALIAS']" in str(message.hint)


def test_check_atomic_databases__jobs_on_their_own_alias__w010_lists_the_default_database(atomic_kind: str) -> None:
    databases = {**settings.DATABASES, "jobs": dict(settings.DATABASES["default"])}
    with override_settings(DATABASES=databases, AWA={"DATABASE_ALIAS": "jobs"}, DATABASE_ROUTERS=[ROUTER]):
        (message,) = check_atomic_databases()
    assert "database 'jobs'" in message.msg
    assert "'default': admin.LogEntry" in message.msg and "more)" in message.msg


def test_check_atomic_databases__one_database__clean(atomic_kind: str) -> None:
    assert check_atomic_databases() == []


def test_check_atomic_databases__no_atomic_handler__clean() -> None:
    assert not any(handler.atomic for handler in registry if handler.kind.startswith("checks."))
    with override_settings(DATABASE_ROUTERS=[ELSEWHERE, ROUTER]):
        messages = check_atomic_databases()
    # Only the project's own atomic handlers (testproject's demo) could make it speak.
    atomic = [handler.kind for handler in registry if handler.atomic]
    assert (messages == []) == (atomic == [])


def test_check_atomic_connections__conn_max_age_0__w011_names_handlers_and_fix(atomic_kind: str) -> None:
    databases = {"default": {**settings.DATABASES["default"], "CONN_MAX_AGE": 0}}
    with override_settings(DATABASES=databases):
        (message,) = check_atomic_connections()
    assert message.id == "awa.W011"
    assert repr(atomic_kind) in message.msg and "CONN_MAX_AGE = 0" in message.msg
    assert "DATABASES['default']['CONN_MAX_AGE']" in str(message.hint)


def test_check_atomic_connections__persistent_or_pooled__clean(atomic_kind: str) -> None:
    persistent = {"default": {**settings.DATABASES["default"], "CONN_MAX_AGE": 600}}
    with override_settings(DATABASES=persistent):
        assert check_atomic_connections() == []
    default = {"default": {**settings.DATABASES["default"], "CONN_MAX_AGE": 0}}
    with override_settings(DATABASES=default, AWA={"POOLER": "transaction"}):
        assert check_atomic_connections() == []
