"""TokenBucket: time is always passed in, so every case is exact and instant."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.concurrency import TokenBucket
from awa_django.exceptions import InvalidRateLimitError, InvalidWorkersError


def empty_bucket(rate: float, burst: int = 0, now: float = 0.0) -> TokenBucket:
    bucket = TokenBucket(rate, burst)
    bucket.take(bucket.burst, now)
    return bucket


def test_take__rate_10_burst_10_grants_10_at_once_then_none() -> None:
    bucket = TokenBucket(10, 10)
    assert bucket.take(100, now=5.0) == 10
    assert bucket.take(100, now=5.0) == 0


@pytest.mark.parametrize(
    ("elapsed", "granted"),
    [
        pytest.param(0.05, 0, id="half_a_token_is_not_a_token"),
        pytest.param(0.1, 1, id="one_tenth_second_one_token"),
        pytest.param(0.35, 3, id="fractions_round_down"),
        pytest.param(1.0, 10, id="one_second_ten_tokens"),
        pytest.param(100.0, 10, id="long_idle_capped_at_burst"),
    ],
)
def test_take__refills_10_per_second_of_passed_time(elapsed: float, granted: int) -> None:
    bucket = empty_bucket(10, 10, now=3.0)
    assert bucket.take(100, now=3.0 + elapsed) == granted


def test_take__leftover_fraction_carries_over() -> None:
    bucket = empty_bucket(10, 10)
    assert bucket.take(100, now=0.15) == 1
    assert bucket.take(100, now=0.2) == 1  # 0.5 + 0.5


def test_take__grants_at_most_wanted_and_keeps_the_rest() -> None:
    bucket = TokenBucket(10, 10)
    assert bucket.take(3, now=0.0) == 3
    assert bucket.available(now=0.0) == 7


def test_take__clock_stepping_back_earns_nothing_and_loses_nothing() -> None:
    bucket = empty_bucket(10, 10, now=10.0)
    assert bucket.take(5, now=9.0) == 0
    assert bucket.take(5, now=10.2) == 2


@pytest.mark.parametrize(
    ("rate", "burst"),
    [(10, 10), (2.5, 3), (0.5, 1), (1, 1)],
    ids=["whole_rate", "fractional_rate_rounds_up", "slow_rate_allows_one", "one_per_second"],
)
def test_burst_0__means_ceil_of_rate(rate: float, burst: int) -> None:
    bucket = TokenBucket(rate)
    assert bucket.burst == burst
    assert bucket.take(100, now=0.0) == burst


def test_refund__gives_tokens_back() -> None:
    bucket = empty_bucket(10, 10)
    bucket.refund(4)
    assert bucket.take(100, now=0.0) == 4


def test_refund__is_capped_at_burst() -> None:
    bucket = TokenBucket(10, 10)
    bucket.take(2, now=0.0)
    bucket.refund(5)
    assert bucket.take(100, now=0.0) == 10


def test_seconds_until__time_to_the_next_whole_tokens() -> None:
    bucket = empty_bucket(10, 10)
    assert bucket.seconds_until(1, now=0.0) == pytest.approx(0.1)
    assert bucket.seconds_until(3, now=0.15) == pytest.approx(0.15)
    assert bucket.seconds_until(0, now=0.0) == 0.0


def test_seconds_until__zero_when_tokens_are_there_and_takes_nothing() -> None:
    bucket = TokenBucket(10, 10)
    assert bucket.seconds_until(10, now=0.0) == 0.0
    assert bucket.take(100, now=0.0) == 10


def test_seconds_until__clock_stepped_back_counts_from_the_latest_time_seen() -> None:
    bucket = empty_bucket(10, 10, now=10.0)
    assert bucket.seconds_until(1, now=9.0) == pytest.approx(1.1)


def test_seconds_until__more_than_burst_raises() -> None:
    with pytest.raises(ValueError, match="the burst is 10"):
        TokenBucket(10, 10).seconds_until(11, now=0.0)


@pytest.mark.parametrize(
    "rate", [0, -1, 0.0, math.nan, math.inf, True], ids=["zero", "negative", "zero_float", "nan", "inf", "bool"]
)
def test_init__rate_not_above_zero_raises(rate: float) -> None:
    with pytest.raises(InvalidRateLimitError, match="use a number above 0"):
        TokenBucket(rate, queue="emails")


def test_init__invalid_rate_error_names_the_queue() -> None:
    with pytest.raises(InvalidRateLimitError) as excinfo:
        TokenBucket(0, queue="emails")
    assert (excinfo.value.queue, excinfo.value.rate) == ("emails", 0)


def test_init__negative_burst_raises() -> None:
    with pytest.raises(InvalidWorkersError, match="rate_burst -1 is invalid"):
        TokenBucket(10, -1)


def test_reconfigure__keeps_tokens_capped_at_new_burst_and_uses_new_rate() -> None:
    bucket = TokenBucket(10, 10)
    bucket.take(2, now=0.0)  # 8 left
    bucket.reconfigure(1, 5, now=0.0)
    assert (bucket.max_rate, bucket.burst) == (1.0, 5)
    assert bucket.take(100, now=0.0) == 5
    assert bucket.take(100, now=1.0) == 1


def test_reconfigure__refills_at_old_rate_up_to_now_first() -> None:
    bucket = empty_bucket(10, 10)
    bucket.reconfigure(1, 10, now=0.5)  # 5 tokens earned at 10/s before the change
    assert bucket.take(100, now=0.5) == 5


def test_reconfigure__unused_bucket_is_full_at_new_burst() -> None:
    bucket = TokenBucket(2)
    bucket.reconfigure(20, now=0.0)
    assert bucket.take(100, now=0.0) == 20


def test_reconfigure__invalid_rate_raises_and_keeps_old_config() -> None:
    bucket = empty_bucket(10, 10)
    with pytest.raises(InvalidRateLimitError):
        bucket.reconfigure(0, 10, now=1.0)
    assert (bucket.max_rate, bucket.burst) == (10.0, 10)
    assert bucket.take(100, now=0.3) == 3  # not refilled to 1.0 by the failed call


# --- properties ---------------------------------------------------------------------

rates = st.floats(0.1, 100.0, allow_nan=False)
bursts = st.integers(0, 50)
steps = st.lists(st.tuples(st.floats(0.0, 2.0, allow_nan=False), st.integers(0, 60), st.integers(0, 5)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(rate=rates, burst=bursts, steps=steps)
def test_take__never_grants_more_than_burst_plus_rate_times_elapsed_plus_refunds(
    rate: float, burst: int, steps: list[tuple[float, int, int]]
) -> None:
    bucket = TokenBucket(rate, burst)
    now, granted_total, refunded = 0.0, 0, 0
    for dt, wanted, refund in steps:
        now += dt
        granted = bucket.take(wanted, now)
        assert 0 <= granted <= wanted
        granted_total += granted
        refund = min(refund, granted)
        bucket.refund(refund)
        refunded += refund
        assert granted_total - refunded <= bucket.burst + rate * now + 1e-6


@settings(max_examples=300, deadline=None)
@given(rate=rates, burst=bursts, spent=st.integers(0, 50), n=st.integers(1, 50), start=st.floats(0, 1e6))
def test_seconds_until__waiting_exactly_that_long_yields_the_tokens(
    rate: float, burst: int, spent: int, n: int, start: float
) -> None:
    bucket = TokenBucket(rate, burst)
    bucket.take(spent, start)
    n = min(n, bucket.burst)
    wait = bucket.seconds_until(n, start)
    assert wait >= 0.0
    assert bucket.take(n, start + wait) == n
