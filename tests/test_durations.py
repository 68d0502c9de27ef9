"""Durations as operators type and read them (`awa_django.durations`), and the admin field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django import durations
from awa_django.forms import HumanDurationField


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("600", timedelta(seconds=600)),
        ("10m", timedelta(minutes=10)),
        ("10M", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("2d 4h", timedelta(days=2, hours=4)),
        ("1.5s", timedelta(seconds=1.5)),
        ("00:10:00", timedelta(minutes=10)),
        ("1 00:00:00", timedelta(days=1)),
        ("P1DT2H", timedelta(days=1, hours=2)),
    ],
)
def test_parse__each_form(text: str, expected: timedelta) -> None:
    assert durations.parse(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "ten minutes", "10x", "m10", "10m garbage", "1h-30m", "::"])
def test_parse__not_a_duration_is_none(text: str) -> None:
    assert durations.parse(text) is None


@given(st.integers(0, 10**8).map(lambda s: timedelta(seconds=s)))
def test_describe_then_parse__round_trips_whole_seconds(value: timedelta) -> None:
    assert durations.parse(durations.describe(value)) == value


@given(st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=3)))
def test_describe_then_parse__round_trips_any_value(value: timedelta) -> None:
    assert durations.parse(durations.describe(value)) == value


def test_describe__compact() -> None:
    assert durations.describe(timedelta(minutes=10)) == "10m"
    assert durations.describe(timedelta(hours=1, minutes=30, seconds=5)) == "1h 30m 5s"
    assert durations.describe(timedelta(0)) == "0s"


def test_field__shows_compact_and_names_the_forms_it_takes() -> None:
    field = HumanDurationField(required=False)
    assert field.prepare_value(timedelta(minutes=10)) == "10m"
    assert field.clean("10m") == field.clean("600") == field.clean("00:10:00") == timedelta(minutes=10)
    assert field.clean("") is None
    with pytest.raises(Exception, match=r"600 \(seconds\), 10m, 1h30m or 00:10:00"):
        field.clean("soon")


@given(st.text(max_size=30))
def test_field__any_text_is_a_duration_or_a_clear_error(text: str) -> None:
    field = HumanDurationField(required=False)
    try:
        value = field.clean(text)
    except Exception as exc:  # only the field's own message, never another error
        assert "Enter a duration such as" in str(exc)
    else:
        assert value is None or isinstance(value, timedelta)
