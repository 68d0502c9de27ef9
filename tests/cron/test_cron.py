"""The cron rule without a database: parsing, slots in a time zone across DST, missed slots."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.cron import CronSpec, parse
from awa_django.exceptions import InvalidScheduleError

UTC = timezone.utc


def fires(spec: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """Every fire instant in (start, end], by chaining next_after."""
    out: list[datetime] = []
    moment = spec.next_after(start)
    while moment <= end:
        out.append(moment)
        moment = spec.next_after(moment)
    return out


def local(zone: str, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(zone), fold=fold)  # type: ignore[misc, arg-type]


# --- DST: spring forward --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "day", "expected_local"),
    [
        # Paris: 2026-03-29 02:00 CET -> 03:00 CEST; New York: 2026-03-08 02:00 EST -> 03:00 EDT.
        ("Europe/Paris", (2026, 3, 29), "2026-03-29T03:30:00+02:00"),
        ("America/New_York", (2026, 3, 8), "2026-03-08T03:30:00-04:00"),
    ],
)
def test_next_after__0230_on_spring_forward_day_fires_once_an_hour_on(
    zone: str, day: tuple[int, int, int], expected_local: str
) -> None:
    spec = parse("30 2 * * *", zone)
    start = local(zone, *day) - timedelta(days=1)
    got = fires(spec, start, start + timedelta(days=3))
    on_the_day = [t for t in got if t.astimezone(ZoneInfo(zone)).date() == datetime(*day).date()]
    assert [t.astimezone(ZoneInfo(zone)).isoformat() for t in on_the_day] == [expected_local]
    assert len(got) == 3  # the day before, the day, the day after: one fire each


@pytest.mark.parametrize(("zone", "day"), [("Europe/Paris", (2026, 3, 29)), ("America/New_York", (2026, 3, 8))])
def test_next_after__every_30_minutes_through_the_gap_fires_each_instant_once(
    zone: str, day: tuple[int, int, int]
) -> None:
    spec = parse("*/30 * * * *", zone)
    start = local(zone, *day, 1, 0)
    got = fires(spec, start, local(zone, *day, 5, 0))
    walls = [t.astimezone(ZoneInfo(zone)).strftime("%H:%M") for t in got]
    # 02:00 and 02:30 do not exist: they fire at 03:00 and 03:30, which then do not fire again.
    assert walls == ["01:30", "03:00", "03:30", "04:00", "04:30", "05:00"]
    assert got == sorted(set(got))


# --- DST: fall back -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "day", "expected"),
    [
        # Paris: 2026-10-25 03:00 CEST -> 02:00 CET, so 02:30 happens twice; it fires the first time.
        ("Europe/Paris", (2026, 10, 25), "2026-10-25T02:30:00+02:00"),
        ("America/New_York", (2026, 11, 1), "2026-11-01T01:30:00-04:00"),
    ],
)
def test_next_after__repeated_wall_time_on_fall_back_day_fires_once_at_first_occurrence(
    zone: str, day: tuple[int, int, int], expected: str
) -> None:
    hour = 2 if zone == "Europe/Paris" else 1
    spec = parse(f"30 {hour} * * *", zone)
    start = local(zone, *day) - timedelta(days=1)
    got = fires(spec, start, start + timedelta(days=3))
    on_the_day = [t for t in got if t.astimezone(ZoneInfo(zone)).date() == datetime(*day).date()]
    assert [t.astimezone(ZoneInfo(zone)).isoformat() for t in on_the_day] == [expected]


def test_next_after__from_inside_the_repeated_hour_skips_to_the_next_new_slot() -> None:
    spec = parse("*/15 * * * *", "Europe/Paris")
    second_pass = local("Europe/Paris", 2026, 10, 25, 2, 20, fold=1)  # 01:20 UTC
    assert spec.next_after(second_pass).astimezone(ZoneInfo("Europe/Paris")).isoformat() == (
        "2026-10-25T03:00:00+01:00"
    )


def test_next_after__utc_schedules_ignore_local_dst() -> None:
    spec = parse("0 * * * *", "UTC")
    start = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)
    assert len(fires(spec, start, start + timedelta(hours=4))) == 4


# --- parsing ------------------------------------------------------------------------------


def test_parse__six_fields_put_seconds_first() -> None:
    spec = parse("*/15 * * * * *", "UTC")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert [t.second for t in fires(spec, start, start + timedelta(minutes=1))] == [15, 30, 45, 0]
    assert spec.has_seconds


@pytest.mark.parametrize(
    ("expression", "tz", "words"),
    [
        ("61 * * * *", "UTC", "is not a valid cron expression"),
        ("* * *", "UTC", "has 3 fields"),
        ("0 0 0 * * * 2030", "UTC", "has 7 fields"),
        ("0 0 31 2 *", "UTC", "never fires"),
        ("* * * * *", "Mars/Olympus", "'Mars/Olympus' is not a known IANA time zone"),
        ("", "UTC", "non-empty string"),
    ],
)
def test_parse__refuses_with_the_value_and_the_fix(expression: str, tz: str, words: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        parse(expression, tz, name="nightly")
    message = str(info.value)
    assert words in message
    assert "schedule 'nightly'" in message


@pytest.mark.parametrize("expression", ["R * * * *", "0 r * * *", "R(0-29)/15 * * * *", "0 0 * * R", "R * * * * *"])
def test_parse__refuses_random_fields(expression: str) -> None:
    """croniter's 'R' draws a random value each time an expression is read, and the leader reads a
    schedule's cron afresh for every plan: 'R * * * *' (meant: hourly at a random minute) fired at
    a new random minute each time, so several times in some hours and none in others; each leader
    and the admin's 'next fire times' drew their own. No fixed slot, so no way to fire each once."""
    with pytest.raises(InvalidScheduleError) as info:
        parse(expression, "UTC", name="nightly")
    assert "random" in str(info.value) and "schedule 'nightly'" in str(info.value)


# --- missed slots -------------------------------------------------------------------------


def test_due__coalesce_limit_one_returns_the_latest_missed_slot() -> None:
    spec = parse("* * * * *", "UTC")
    first = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 0, 10, 30, tzinfo=UTC)
    slots, following, skipped = spec.due(first, now, 1)
    assert slots == [datetime(2026, 1, 1, 0, 10, tzinfo=UTC)]
    assert following == datetime(2026, 1, 1, 0, 11, tzinfo=UTC)
    assert skipped


def test_due__catch_up_returns_each_missed_slot_from_first() -> None:
    spec = parse("* * * * *", "UTC")
    first = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 0, 10, 30, tzinfo=UTC)
    slots, following, skipped = spec.due(first, now, 100)
    assert slots == [first + timedelta(minutes=i) for i in range(11)]
    assert following == datetime(2026, 1, 1, 0, 11, tzinfo=UTC)
    assert not skipped


def test_due__a_week_down_with_a_per_second_schedule_costs_only_the_limit() -> None:
    spec = parse("* * * * * *", "UTC")
    now = datetime(2026, 1, 8, tzinfo=UTC)
    slots, following, skipped = spec.due(now - timedelta(days=7), now, 5)
    assert slots == [now - timedelta(seconds=4 - i) for i in range(5)]
    assert following == now + timedelta(seconds=1)
    assert skipped


def test_due__nothing_before_first() -> None:
    spec = parse("* * * * *", "UTC")
    first = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert spec.due(first, first - timedelta(seconds=1), 10) == ([], first, False)


@pytest.mark.parametrize(("expression", "limit"), [("@yearly", 10_000), ("0 0 29 2 *", 1_000)])
def test_due__a_rare_schedule_whose_limit_reaches_before_year_one_fires_its_slot(expression: str, limit: int) -> None:
    """catch_up_limit slots back from now can lie before year 1 for a yearly schedule: the slot
    that is due still fires (the limit cannot drop anything there), nothing raises."""
    spec = parse(expression, "UTC")
    now = datetime(2028, 3, 1, tzinfo=UTC)
    first = spec.next_after(now - timedelta(days=400))
    slots, following, skipped = spec.due(first, now, limit)
    assert slots == [first] and following == spec.next_after(first) and not skipped


ZONES = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])
EXPRESSIONS = st.sampled_from(["*/7 * * * *", "30 2 * * *", "0,30 1-3 * * *", "*/20 * * * * *", "15 */2 * * 0"])


@settings(max_examples=150, deadline=None)
@given(
    expression=EXPRESSIONS,
    zone=ZONES,
    start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)),
    span_minutes=st.integers(min_value=0, max_value=6 * 60),
    limit=st.integers(min_value=1, max_value=40),
)
def test_due__is_the_tail_of_the_chain_of_next_after(
    expression: str, zone: str, start: datetime, span_minutes: int, limit: int
) -> None:
    """Whatever the zone and DST: due() returns the latest `limit` slots of the next_after chain
    from `first` up to now, strictly increasing, and the next fire is the chain's next link."""
    spec = parse(expression, zone)
    first = spec.next_after(start)
    now = first + timedelta(minutes=span_minutes)
    chain = [first, *fires(spec, first, now)]
    slots, following, skipped = spec.due(first, now, limit)
    assert slots == chain[-limit:]
    assert all(a < b for a, b in itertools.pairwise(slots))
    assert following == spec.next_after(chain[-1]) and following > now
    assert skipped == (len(chain) > limit)
