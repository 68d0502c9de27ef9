"""The capacity rules shared by worker startup, the admin form and the system check."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from awa_django.concurrency import QueueLimits, collect_capacity_errors, validate_capacity
from awa_django.exceptions import (
    ConfigurationError,
    InvalidRateLimitError,
    InvalidWeightError,
    InvalidWorkersError,
    MinWorkersExceedGlobalError,
)


@pytest.mark.parametrize(
    ("limits", "error", "message"),
    [
        pytest.param(QueueLimits(weight=0), InvalidWeightError, "weight 0 is invalid", id="weight_zero"),
        pytest.param(QueueLimits(weight=-2), InvalidWeightError, "weight -2", id="weight_negative"),
        pytest.param(QueueLimits(weight=1.5), InvalidWeightError, "weight 1.5", id="weight_float"),  # type: ignore[arg-type]
        pytest.param(QueueLimits(weight=True), InvalidWeightError, "weight True", id="weight_bool"),
        pytest.param(QueueLimits(max_workers=0), InvalidWorkersError, "max_workers 0", id="max_workers_zero"),
        pytest.param(QueueLimits(min_workers=-1), InvalidWorkersError, "min_workers -1", id="min_workers_negative"),
        pytest.param(QueueLimits(rate_limit=0), InvalidRateLimitError, "rate limit 0 ", id="rate_zero"),
        pytest.param(QueueLimits(rate_limit=-0.5), InvalidRateLimitError, "rate limit -0.5", id="rate_negative"),
        pytest.param(QueueLimits(rate_limit=math.nan), InvalidRateLimitError, "rate limit nan", id="rate_nan"),
        pytest.param(QueueLimits(rate_limit=math.inf), InvalidRateLimitError, "rate limit inf", id="rate_infinite"),
        pytest.param(QueueLimits(rate_burst=-1), InvalidWorkersError, "rate_burst -1", id="burst_negative"),
    ],
)
def test_validate_capacity__bad_queue_setting_raises_naming_queue_and_value(
    limits: QueueLimits, error: type[ConfigurationError], message: str
) -> None:
    with pytest.raises(error, match=f"queue 'emails': {message}"):
        validate_capacity(None, {"emails": limits})


@pytest.mark.parametrize(
    ("global_max", "queues"),
    [
        pytest.param(None, {"a": QueueLimits()}, id="hard_reserved_defaults"),
        pytest.param(None, {"a": QueueLimits(min_workers=500)}, id="hard_reserved_ignores_min_sum"),
        pytest.param(20, {"a": QueueLimits(min_workers=15), "b": QueueLimits(min_workers=5)}, id="min_sum_equal"),
        pytest.param(1, {}, id="no_queues"),
        pytest.param(4, {"a": QueueLimits(rate_limit=0.01, rate_burst=3, weight=7)}, id="slow_rate"),
    ],
)
def test_validate_capacity__valid_config_passes(global_max: int | None, queues: dict[str, QueueLimits]) -> None:
    validate_capacity(global_max, queues)
    assert collect_capacity_errors(global_max, queues) == []


def test_validate_capacity__min_sum_over_global_names_both_numbers() -> None:
    queues = {"a": QueueLimits(min_workers=20), "b": QueueLimits(min_workers=5)}
    with pytest.raises(
        MinWorkersExceedGlobalError, match=r"sum of min_workers \(25\) exceeds global_max_workers \(20\)"
    ) as exc:
        validate_capacity(20, queues)
    assert (exc.value.sum_min_workers, exc.value.global_max_workers) == (25, 20)


@pytest.mark.parametrize("global_max", [0, -3, 2.5, True], ids=["zero", "negative", "float", "bool"])
def test_validate_capacity__global_below_one_raises(global_max: int) -> None:
    with pytest.raises(ConfigurationError, match=r"global_max_workers .* must be an integer of at least 1"):
        validate_capacity(global_max, {"a": QueueLimits()})


def test_collect_capacity_errors__returns_every_problem_in_order() -> None:
    queues = {
        "a": QueueLimits(weight=0, min_workers=8),
        "b": QueueLimits(max_workers=0, rate_limit=-1, min_workers=-4),
    }
    errors = collect_capacity_errors(5, queues)
    assert [type(e) for e in errors] == [
        InvalidWeightError,
        InvalidWorkersError,
        InvalidWorkersError,
        InvalidRateLimitError,
        MinWorkersExceedGlobalError,
    ]
    assert [getattr(e, "queue", None) for e in errors] == ["a", "b", "b", "b", None]
    assert isinstance(errors[-1], MinWorkersExceedGlobalError)
    assert errors[-1].sum_min_workers == 8  # the invalid -4 is reported, not summed


def test_validate_capacity__raises_the_first_collected_error() -> None:
    queues = {"a": QueueLimits(max_workers=0), "b": QueueLimits(weight=0)}
    with pytest.raises(InvalidWorkersError, match="queue 'a'"):
        validate_capacity(None, queues)


def test_collect_capacity_errors__invalid_global_skips_the_sum_rule() -> None:
    errors = collect_capacity_errors(0, {"a": QueueLimits(min_workers=3)})
    assert len(errors) == 1
    assert not isinstance(errors[0], MinWorkersExceedGlobalError)


def test_validate_capacity__accepts_any_object_with_the_fields() -> None:
    @dataclass
    class QueueRow:  # stands in for a Queue model row
        max_workers: int = 50
        min_workers: int = 0
        weight: int = 1
        rate_limit: float | None = None
        rate_burst: int = 0

    errors = collect_capacity_errors(10, {"a": QueueRow(min_workers=6), "b": QueueRow(min_workers=6)})
    assert len(errors) == 1
    assert isinstance(errors[0], MinWorkersExceedGlobalError)
    assert errors[0].sum_min_workers == 12
