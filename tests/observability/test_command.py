"""awa_worker's metrics options: every mistake is a CommandError naming the value and the fix."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from awa_django.management.commands.awa_worker import metrics_sink
from awa_django.observability.sink import NoopSink


def test_metrics__unknown_sink_name() -> None:
    with pytest.raises(CommandError, match=r"unknown metrics sink 'bogus'; use one of none, prometheus, otel"):
        call_command("awa_worker", "--metrics", "bogus")


def test_metrics__dotted_path_that_is_not_a_sink() -> None:
    with pytest.raises(CommandError, match=r"'awa_django.conf.AwaSettings' is .*not a MetricsSink subclass"):
        metrics_sink("awa_django.conf.AwaSettings", None)
    with pytest.raises(CommandError, match=r"cannot be imported.*fix the dotted path"):
        metrics_sink("awa_django.nowhere.Sink", None)


def test_metrics__port_without_a_scrapable_sink() -> None:
    with pytest.raises(CommandError, match=r"--metrics-port 9999 needs metrics to expose: pass --metrics prometheus"):
        metrics_sink("tests.observability.support.RecordingSink", 9999)


@pytest.mark.parametrize("value", [0, 70000, "9108", True])
def test_metrics__bad_port_setting(value: object) -> None:
    with override_settings(AWA={"METRICS_PORT": value}), pytest.raises(CommandError, match=r"AWA\['METRICS_PORT'\] is"):
        metrics_sink(None, None)


def test_metrics__bad_port_option() -> None:
    with pytest.raises(CommandError, match=r"'70000' is not a port number: use 1 to 65535"):
        call_command("awa_worker", "--metrics-port", "70000")


def test_metrics__off_by_default() -> None:
    assert isinstance(metrics_sink(None, None), NoopSink)
