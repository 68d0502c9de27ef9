"""The per-kind retry rules, pure: which rule decides, the curves, and declaration errors."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.registry import job, registry
from awa_django.retry import DEFAULT_POLICY, Backoff, RetryPolicy, RuleError, policy
from awa_django.states import JobState


class ParentError(Exception):
    pass


class ChildError(ParentError):
    pass


RULES = RetryPolicy(retry_on=(ConnectionError,), discard_on=(ValueError,))


@pytest.mark.parametrize(
    ("exc", "state", "rule"),
    [
        (UnicodeError("x"), "failed", "discard_on ValueError"),  # a subclass of a discard_on class
        (ValueError("x"), "failed", "discard_on ValueError"),
        (ConnectionResetError("x"), "retryable", "retry_on ConnectionError"),  # a subclass of retry_on
        (KeyError("x"), "retryable", None),  # neither: the default rule
    ],
)
def test_decide__discard_on_fails_retry_on_retries_the_rest_by_default(
    exc: BaseException, state: str, rule: str | None
) -> None:
    decision = RULES.decide(exc, attempt=1, max_attempts=5, rng=random.Random(1))

    assert (decision.state, decision.rule) == (state, rule)
    assert (decision.delay is None) == (state == JobState.FAILED)


def test_decide__attempts_used_up__fails_even_on_retry_on_naming_the_rule() -> None:
    decision = RULES.decide(ConnectionResetError(), attempt=5, max_attempts=5)

    assert decision.state == JobState.FAILED
    assert decision.rule == "retry_on ConnectionError; attempts used up (5)"
    assert DEFAULT_POLICY.decide(KeyError(), 5, 5).rule is None


def test_decide__both_lists_match__the_more_specific_class_decides() -> None:
    rules = RetryPolicy(retry_on=(ParentError,), discard_on=(ChildError,))
    assert rules.decide(ChildError(), 1, 5).state == JobState.FAILED
    assert rules.decide(ParentError(), 1, 5).state == JobState.RETRYABLE
    flipped = RetryPolicy(retry_on=(ChildError,), discard_on=(ParentError,))
    assert flipped.decide(ChildError(), 1, 5).state == JobState.RETRYABLE
    assert flipped.decide(ParentError(), 1, 5).state == JobState.FAILED


@given(
    curve=st.sampled_from(["exponential", "linear", "constant"]),
    base=st.floats(0, 1000),
    factor=st.floats(1, 10),
    jitter=st.floats(0, 1),
    cap=st.floats(0.001, 10**6),
    attempt=st.integers(1, 10_000),
    seed=st.integers(),
)
def test_backoff__delay_is_the_curve_plus_at_most_its_jitter_never_past_the_cap(
    curve: str, base: float, factor: float, jitter: float, cap: float, attempt: int, seed: int
) -> None:
    rule = Backoff(curve, base, factor, jitter, cap)  # type: ignore[arg-type]
    assert rule.problem() is None
    raw = rule.raw(attempt)

    delay = rule(attempt, random.Random(seed))

    assert raw <= delay <= min(raw * (1 + jitter), cap)
    assert raw <= cap


def test_backoff__default_is_two_to_the_attempt_with_a_quarter_jitter() -> None:
    assert [Backoff().raw(n) for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert Backoff().raw(40) == 24 * 3600.0


def test_backoff__callable__its_seconds_used_and_a_failing_one_falls_back_saying_so() -> None:
    assert RetryPolicy(backoff=lambda attempt: attempt * 10.0).decide(KeyError(), 3, 5).delay == 30.0

    def broken(attempt: int) -> float:
        raise ZeroDivisionError("oops")

    decision = RetryPolicy(backoff=broken).decide(KeyError(), 1, 5, random.Random(0))
    assert decision.state == JobState.RETRYABLE and decision.delay is not None and 2.0 <= decision.delay <= 2.5
    assert decision.rule == "backoff raised ZeroDivisionError: oops; default curve used"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_on": "ValueError"}, "retry_on='ValueError' must be an exception class or a tuple of them"),
        ({"discard_on": (ValueError, int)}, "which is not an exception class"),
        ({"retry_on": ()}, "names no exception class"),
        ({"retry_on": ValueError, "discard_on": (ValueError,)}, "both name ValueError"),
        ({"backoff": 5}, "must be a callable attempt -> seconds, or a Backoff"),
        ({"backoff": Backoff(jitter=2)}, "has jitter 2; use a fraction from 0 to 1"),
        ({"backoff": Backoff("cubic")}, "has curve 'cubic'"),  # type: ignore[arg-type]
        ({"backoff": Backoff(cap=0)}, "has cap 0"),
        ({"backoff": Backoff(factor=0.5)}, "has factor 0.5; use a number of at least 1"),
    ],
)
def test_policy__bad_rule__refused_naming_the_kind_option_and_value(options: dict[str, object], message: str) -> None:
    with pytest.raises(RuleError, match="job 'k': ") as raised:
        policy("k", **options)

    assert message in str(raised.value)


@pytest.mark.parametrize("timeout", [0, -1, True, "30", float("nan"), float("inf"), 10**9])
def test_job__bad_timeout__refused_at_declaration(timeout: object) -> None:
    with pytest.raises(RuleError, match=r"timeout=.* must be seconds above 0"):
        job("test_retry_bad_timeout", timeout=timeout)  # type: ignore[arg-type]

    assert "test_retry_bad_timeout" not in registry
