"""awa_django.conf: settings.AWA as one typed object, built once per value, every rule in one place."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from typing import cast

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from awa_django.checks import check_settings
from awa_django.conf import DEFAULTS, AwaSettings, InvalidSettingsError, awa_settings, build, find_problems


class Junk:
    """A value no setting accepts."""

    def __repr__(self) -> str:
        return "<junk>"


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_find_problems__every_setting_has_a_rule_that_names_key_and_value(key: str) -> None:
    [problem] = find_problems({key: Junk()})

    assert problem.key == key
    assert problem.id.startswith("awa.E")
    assert "<junk>" in problem.message
    assert key in problem.message
    assert problem.hint


def test_build__no_settings_is_the_declared_defaults_without_problems() -> None:
    current, problems = build({})

    assert problems == []
    assert current == AwaSettings()
    assert {f.name: getattr(current, f.name) for f in fields(AwaSettings)} == DEFAULTS


def test_build__values_take_their_declared_types() -> None:
    current, problems = build(
        {"POLL_INTERVAL": 2, "SHUTDOWN_TIMEOUT": 3, "COMPLETED_RETENTION": 60, "FAILED_RETENTION": timedelta(hours=1)}
    )

    assert problems == []
    assert current.POLL_INTERVAL == 2.0 and isinstance(current.POLL_INTERVAL, float)
    assert isinstance(current.SHUTDOWN_TIMEOUT, float)
    assert current.COMPLETED_RETENTION == timedelta(seconds=60)
    assert current.FAILED_RETENTION == timedelta(hours=1)


def test_build__a_bad_value_keeps_the_default_and_is_reported() -> None:
    current, problems = build({"POOL_SIZE": 0, "SYNC_THREADS": 3})

    assert [(p.key, p.id) for p in problems] == [("POOL_SIZE", "awa.E006")]
    assert current.POOL_SIZE == DEFAULTS["POOL_SIZE"]
    assert current.SYNC_THREADS == 3


def test_build__metrics_none_reads_as_none() -> None:
    current, problems = build({"METRICS": None})

    assert problems == []
    assert current.METRICS == "none"


def test_awa_settings__built_once_and_rebuilt_when_override_settings_changes_awa() -> None:
    before = awa_settings()
    assert awa_settings() is before

    with override_settings(AWA={"POLL_INTERVAL": 0.25, "GLOBAL_MAX_WORKERS": 7}):
        inside = awa_settings()
        assert (inside.POLL_INTERVAL, inside.GLOBAL_MAX_WORKERS) == (0.25, 7)
        assert awa_settings() is inside

    after = awa_settings()
    assert after == before
    assert after.POLL_INTERVAL == DEFAULTS["POLL_INTERVAL"]


def test_awa_settings__settings_fixture_changes_take_effect(settings) -> None:
    settings.DATABASES = {**settings.DATABASES, "jobs": dict(settings.DATABASES["default"])}
    settings.AWA = {"DATABASE_ALIAS": "jobs", "MAX_TAGS": 3}

    assert (awa_settings().DATABASE_ALIAS, awa_settings().MAX_TAGS) == ("jobs", 3)


@override_settings(AWA={"POLL_INTERVAL": -1, "POOLER": "session"})
def test_awa_settings__bad_values_raise_naming_each_value_and_check_id() -> None:
    with pytest.raises(InvalidSettingsError) as caught:
        awa_settings()

    assert isinstance(caught.value, ImproperlyConfigured)
    assert [p.key for p in caught.value.problems] == ["POLL_INTERVAL", "POOLER"]
    text = str(caught.value)
    assert "AWA['POLL_INTERVAL'] is -1" in text and "[awa.E003]" in text
    assert "AWA['POOLER'] is 'session'" in text and "[awa.E012]" in text


@override_settings(AWA={"POLL_INTERVAL": -1})
def test_awa_settings__a_bad_value_is_raised_again_until_fixed() -> None:
    for _ in range(2):  # a failed build is not cached as a good one
        with pytest.raises(InvalidSettingsError):
            awa_settings()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("DATABASE_WAIT_TIMEOUT", -1),
        ("METRICS_PORT", 70000),
        ("LISTEN", "no"),
        ("METRICS_ADDR", ""),
        ("METRICS_TOKEN", 42),
        ("METRICS", 3),
    ],
)
def test_check_settings__values_checked_only_where_used_before_are_e015(key: str, value: object) -> None:
    with override_settings(AWA={key: value}):
        messages = check_settings()

    assert [m.id for m in messages] == ["awa.E015"]
    assert f"AWA[{key!r}] is {value!r}" in messages[0].msg


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6), st.booleans()))
def test_is_seconds__one_rule_for_the_settings_and_the_commands_arguments(value: object) -> None:
    """A value the settings accept as seconds is one the command line accepts, and back."""
    from argparse import ArgumentTypeError

    from awa_django.conf import is_seconds
    from awa_django.management.arguments import seconds, seconds_or_zero

    def accepted(parse: Callable[[str], float], text: str) -> bool:
        try:
            parse(text)
        except ArgumentTypeError:
            return False
        return True

    accepted_as_setting = not find_problems({"POLL_INTERVAL": value})
    assert accepted_as_setting == is_seconds(value)
    assert (not find_problems({"DATABASE_WAIT_TIMEOUT": value})) == is_seconds(value, zero_ok=True)
    if not isinstance(value, bool):
        assert accepted(seconds, repr(value)) == is_seconds(value)
        assert accepted(seconds_or_zero, repr(value)) == is_seconds(value, zero_ok=True)
    if is_seconds(value):
        assert math.isfinite(cast(float, value)) and cast(float, value) > 0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("statsd", "neither a known sink ('none', 'prometheus', 'otel') nor a dotted path"),
        ("myproject.metrics.StatsdSink", "cannot be imported (ModuleNotFoundError"),
        ("awa_django.observability.sink.NoSuchSink", "cannot be imported (ImportError"),
        ("awa_django.observability.sink.OUTCOMES", "which is not a MetricsSink subclass"),
    ],
)
def test_check_settings__metrics_that_names_no_sink_is_e015_at_check_time(value: str, why: str) -> None:
    """The worker's load_sink would refuse these; `check` refuses them first, saying why."""
    with override_settings(AWA={"METRICS": value}):
        messages = check_settings()

    assert [m.id for m in messages] == ["awa.E015"]
    assert messages[0].msg.startswith(f"AWA['METRICS'] is {value!r}, ")
    assert why in messages[0].msg
    assert messages[0].hint is not None and "dotted path of your MetricsSink subclass" in messages[0].hint


@pytest.mark.parametrize("value", ["none", "prometheus", "otel", "awa_django.observability.sink.NoopSink", None])
def test_check_settings__metrics_known_names_and_sink_paths_pass(value: str | None) -> None:
    with override_settings(AWA={"METRICS": value}):
        assert check_settings() == []
