"""Declaring schedules in code, and synchronising them into Schedule rows at worker start."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from awa_django.exceptions import InvalidScheduleError
from awa_django.models import Schedule, ScheduleSource
from awa_django.registry import Registry, RegistryError, ScheduleSpec, job, registry, schedule
from awa_django.schedules import schedules
from awa_django.services.schedules import sync_schedules

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def clean_registry() -> Iterator[Registry]:
    """The global registry, with whatever a test declares in it removed afterwards."""
    before_kinds = {h.kind for h in registry}
    before_schedules = {s.name for s in schedules}
    try:
        yield registry
    finally:
        for spec in schedules:
            if spec.name not in before_schedules:
                schedules.remove(spec.name)
        for handler in registry:
            if handler.kind not in before_kinds:
                registry.unregister(handler.kind)


def test_job_with_cron__declares_a_schedule_named_after_the_kind(clean_registry: Registry) -> None:
    @job("nightly_report_t", cron="0 3 * * *", timezone="Europe/Paris", args={"format": "pdf"}, queue="reports")
    def nightly_report(format: str) -> None: ...

    (spec,) = [s for s in schedules if s.name == "nightly_report_t"]
    assert spec == ScheduleSpec(
        "nightly_report_t", "nightly_report_t", "0 3 * * *", "Europe/Paris", {"format": "pdf"}, "reports"
    )


def test_schedule__several_schedules_of_one_kind_take_the_kinds_options(clean_registry: Registry) -> None:
    @job("export_t", queue="exports", priority=3, max_attempts=4)
    def export(region: str) -> None: ...

    schedule("export_eu", export, "0 1 * * *", timezone="Europe/Berlin", args={"region": "eu"})
    schedule("export_us", "export_t", "0 1 * * *", timezone="America/Chicago", args={"region": "us"}, missed="catch_up")
    specs = {s.name: s for s in schedules}
    assert (specs["export_eu"].queue, specs["export_eu"].priority, specs["export_eu"].max_attempts) == ("exports", 3, 4)
    assert specs["export_us"].missed == "catch_up"
    assert specs["export_us"].args == {"region": "us"}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"cron": "0 25 * * *"}, "cron '0 25 * * *' (UTC): is not a valid cron expression"),
        ({"cron": "0 3 * * *", "timezone": "Europe/Pariss"}, "'Europe/Pariss' is not a known IANA time zone"),
        ({"cron": "0 3 * * *", "missed": "all"}, "missed='all' is not a policy"),
        ({"cron": "0 3 * * *", "missed": "catch_up", "catch_up_limit": 0}, "catch_up_limit=0 must be an integer"),
        ({"cron": "0 3 * * *", "args": {"when": datetime(2026, 1, 1)}}, "args="),
    ],
)
def test_job_with_a_bad_schedule__is_refused_naming_it(
    clean_registry: Registry, kwargs: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        job("bad_schedule_t", **kwargs)  # type: ignore[arg-type]
    assert "schedule 'bad_schedule_t'" in str(info.value)
    assert words in str(info.value)
    assert "bad_schedule_t" not in {s.name for s in schedules}


def test_schedule__same_name_twice_with_another_cron_is_refused(clean_registry: Registry) -> None:
    schedule("twice_t", "noop", "0 3 * * *")
    with pytest.raises(RegistryError, match="schedule 'twice_t' is already declared"):
        schedule("twice_t", "noop", "0 4 * * *")


def test_job_args_without_cron__is_refused(clean_registry: Registry) -> None:
    with pytest.raises(RegistryError, match="pass cron= too"):
        job("args_only_t", args={"a": 1})


def test_job_takes_context_not_a_bool__is_refused(clean_registry: Registry) -> None:
    # takes_context="no" (truthy) made the handler's first parameter the JobContext, silently.
    def send(context: object, user_id: int) -> None: ...

    with pytest.raises(RegistryError, match=r"takes_context='no' must be True or False"):
        job("takes_context_str_t", takes_context="no")(send)  # type: ignore[arg-type]

    assert registry.registered("takes_context_str_t") is None


@pytest.mark.parametrize(
    "option",
    [{"paused": True}, {"missed": "skip"}, {"missed": "bogus"}, {"catch_up_limit": 5}, {"timezone": "Europe/Paris"}],
)
def test_job_schedule_options_without_cron__are_refused_not_ignored(
    clean_registry: Registry, option: dict[str, object]
) -> None:
    # @job("k", paused=True) without cron= registered the kind and paused nothing.
    [(name, value)] = option.items()
    with pytest.raises(RegistryError, match=rf"{name}={value!r}.*pass cron= too"):
        job("schedule_option_only_t", **option)  # type: ignore[arg-type]

    assert registry.registered("schedule_option_only_t") is None


# --- sync -------------------------------------------------------------------------------


def spec(name: str, cron: str = "0 3 * * *", **kw: object) -> ScheduleSpec:
    return ScheduleSpec(name, "noop", cron, **kw)  # type: ignore[arg-type]


@pytest.mark.django_db
def test_sync__creates_rows_with_the_first_fire_after_now() -> None:
    result = sync_schedules([spec("a", timezone="Europe/Paris"), spec("b", paused=True)], now=NOW)
    assert result.created == ["a", "b"]
    a, b = Schedule.objects.order_by("name")
    assert a.source == ScheduleSource.CODE and a.timezone == "Europe/Paris"
    assert a.next_fire_at == datetime(2026, 6, 2, 1, 0, tzinfo=timezone.utc)  # 03:00 CEST
    assert a.last_fire_at is None and not a.paused
    assert b.paused  # declared paused: the row starts paused


@pytest.mark.django_db
def test_sync__is_idempotent_and_keeps_the_operators_pause() -> None:
    sync_schedules([spec("a")], now=NOW)
    Schedule.objects.filter(name="a").update(paused=True)
    result = sync_schedules([spec("a")], now=NOW + timedelta(hours=1))
    assert (result.created, result.updated, result.removed) == ([], [], [])
    assert Schedule.objects.get(name="a").paused


@pytest.mark.django_db
def test_sync__a_changed_cron_retimes_the_schedule() -> None:
    sync_schedules([spec("a")], now=NOW)
    result = sync_schedules([spec("a", cron="0 5 * * *", args={"x": 1})], now=NOW)
    row = Schedule.objects.get(name="a")
    assert result.updated == ["a"]
    assert (row.cron, row.args, row.next_fire_at) == (
        "0 5 * * *",
        {"x": 1},
        datetime(2026, 6, 2, 5, tzinfo=timezone.utc),
    )


@pytest.mark.django_db
def test_sync__a_schedule_removed_from_code_is_disabled_not_deleted() -> None:
    sync_schedules([spec("kept"), spec("gone")], now=NOW)
    Schedule.objects.create(name="from_admin", kind="noop", cron="* * * * *", next_fire_at=NOW)
    result = sync_schedules([spec("kept")], now=NOW + timedelta(minutes=5))
    assert result.removed == ["gone"]
    gone = Schedule.objects.get(name="gone")
    assert gone.removed_from_code_at == NOW + timedelta(minutes=5)
    assert not gone.is_active
    assert Schedule.objects.get(name="from_admin").removed_from_code_at is None  # admin rows are not code's
    # Declared again: enabled again, from the next slot after now.
    later = NOW + timedelta(days=3)
    assert sync_schedules([spec("kept"), spec("gone")], now=later).updated == ["gone"]
    gone.refresh_from_db()
    assert gone.removed_from_code_at is None
    assert gone.next_fire_at == datetime(2026, 6, 5, 3, tzinfo=timezone.utc)


@pytest.mark.django_db(transaction=True)
def test_sync__workers_starting_together_create_each_schedule_once() -> None:
    """Several workers run sync_schedules at start at the same moment: none fails on the unique
    name, and each declared schedule exists once."""
    import threading

    from django.db import connections

    from awa_django.models import Schedule
    from awa_django.registry import ScheduleSpec
    from awa_django.services.schedules import sync_schedules

    specs = [ScheduleSpec(name=f"together_{i}", kind="noop", cron="* * * * *") for i in range(5)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run() -> None:
        try:
            start.wait()
            sync_schedules(specs)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert Schedule.objects.filter(name__startswith="together_").count() == 5
