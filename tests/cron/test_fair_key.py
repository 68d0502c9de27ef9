"""A schedule's jobs get the schedule's own fairness key, else the kind's ``@job(fair_key=)``
derived from the schedule's args, else the default key: when the leader fires it, when an operator
runs it now, and as declared in code (checked at declaration, synchronised into the row)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from awa_django.exceptions import InvalidScheduleError
from awa_django.models import Job, Schedule
from awa_django.registry import Registry, job, registry, schedule
from awa_django.schedules import schedules
from awa_django.services.schedules import run_schedules_now, sync_schedules
from awa_django.worker.db import connection_kwargs
from awa_django.worker.scheduler import Scheduler

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kinds() -> Iterator[Registry]:
    @job("test_fk_tenant_report", fair_key=lambda args: f"tenant:{args['tenant_id']}")
    def report(tenant_id: int) -> None: ...

    @job("test_fk_keyless")
    def keyless(tenant_id: int) -> None: ...

    @job("test_fk_broken_rule", fair_key=lambda args: args["nope"])
    def broken(tenant_id: int) -> None: ...

    try:
        yield registry
    finally:
        for name in [s.name for s in schedules if s.kind.startswith("test_fk_")]:
            schedules.remove(name)
        for kind in ("test_fk_tenant_report", "test_fk_keyless", "test_fk_broken_rule"):
            registry.unregister(kind)


def due(name: str, kind: str, **fields: Any) -> Schedule:
    first = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=1)
    return Schedule.objects.create(
        name=name, kind=kind, cron="* * * * *", args={"tenant_id": 7}, next_fire_at=first, **fields
    )


def one_round(handlers: Registry) -> int:
    async def go() -> int:
        params = connection_kwargs("default")
        params.pop("autocommit", None)
        async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as conn:
            return await Scheduler(handlers).fire_due(conn)

    return asyncio.run(go())


def fired_key(name: str) -> str:
    (key,) = Job.objects.filter(metadata__schedule=name).values_list("fair_key", flat=True)
    return str(key)


def test_fire__the_schedules_key_else_the_kinds_derived_key_else_the_default(kinds: Registry) -> None:
    due("own", "test_fk_tenant_report", fair_key="schedule-key")
    due("derived", "test_fk_tenant_report")
    due("none", "test_fk_keyless")
    due("unknown_kind", "test_fk_nobody")

    assert one_round(kinds) == 4

    assert [fired_key(n) for n in ("own", "derived", "none", "unknown_kind")] == ["schedule-key", "tenant:7", "", ""]


def test_fire__a_rule_that_fails__still_fires_on_the_default_key_and_says_why(
    kinds: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="awa_django.worker.scheduler")
    due("broken", "test_fk_broken_rule")

    assert one_round(kinds) == 1

    assert fired_key("broken") == ""
    (record,) = [r for r in caplog.records if "default fairness key" in r.getMessage()]
    assert "'test_fk_broken_rule'" in record.getMessage() and "schedule=broken" in record.getMessage()


def test_run_now__the_same_precedence(kinds: Registry) -> None:
    due("own", "test_fk_tenant_report", fair_key="schedule-key")
    due("derived", "test_fk_tenant_report")

    run_schedules_now(["own", "derived"])

    assert (fired_key("own"), fired_key("derived")) == ("schedule-key", "tenant:7")


def test_declared__a_key_of_its_own_is_synced_and_a_bad_one_refused(kinds: Registry) -> None:
    schedule("test_fk_nightly", "test_fk_keyless", "0 3 * * *", args={"tenant_id": 1}, fair_key="nightly")
    with pytest.raises(InvalidScheduleError, match=r"schedule 'test_fk_bad'.*fair_key='a\\x00b'.*NUL"):
        schedule("test_fk_bad", "test_fk_keyless", "0 3 * * *", args={"tenant_id": 1}, fair_key="a\x00b")

    sync_schedules([s for s in schedules if s.name == "test_fk_nightly"])

    assert Schedule.objects.get(name="test_fk_nightly").fair_key == "nightly"


def test_declared__a_derivation_that_fails_for_the_schedules_args__refused_at_declaration(kinds: Registry) -> None:
    with pytest.raises(InvalidScheduleError, match=r"schedule 'test_fk_cron'.*'test_fk_broken_rule' raised KeyError"):
        schedule("test_fk_cron", "test_fk_broken_rule", "0 3 * * *", args={"tenant_id": 1})
    with pytest.raises(InvalidScheduleError, match=r"'test_fk_cron_kind' raised KeyError\('tenant_id'\)"):

        @job("test_fk_cron_kind", cron="0 3 * * *", fair_key=lambda args: f"t:{args['tenant_id']}")
        def ticks() -> None: ...

    assert "test_fk_cron_kind" not in registry
    schedule("test_fk_cron", "test_fk_broken_rule", "0 3 * * *", args={"tenant_id": 1}, fair_key="own")  # its own wins
