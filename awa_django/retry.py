"""Per-kind execution rules: what a failed attempt does next, and how long its retry waits.

Pure: no I/O, no clock; the random source is passed in. ``@job`` validates the rules when it is
declared (``policy``); the worker's executor asks ``RetryPolicy.decide`` at one point, once an
attempt raised, and writes what it answers.

The rule for an exception ``exc`` of attempt ``attempt`` (of ``max_attempts``):

* ``discard_on`` matches (``isinstance``, so subclasses too): fail now, no retry.
* ``retry_on`` matches: retry, unless the attempts are used up.
* Neither: today's rule, the same as ``retry_on`` (retry until the attempts are used up).

When a class of each list matches (``retry_on=OSError, discard_on=ConnectionError`` and a
``ConnectionResetError``), the more specific one decides: the one that comes first in the
exception's method resolution order. The error entry of the attempt names the rule that decided
(``"rule": "discard_on ValueError"``).

A retry waits ``backoff(attempt)`` seconds: a ``Backoff`` curve (the default is 2^attempt seconds
plus up to 25 % jitter, at most 24 hours) or any callable ``attempt -> seconds``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from awa_django.exceptions import AwaError
from awa_django.states import JobState

CURVES = ("exponential", "linear", "constant")
MAX_BACKOFF = 24 * 3600.0
# A delay longer than this is not a retry anyone waits for (and overflows a timestamp soon after).
BACKOFF_CAP_MAX = 365 * 24 * 3600.0
TIMEOUT_MAX = 365 * 24 * 3600.0


class RuleError(AwaError, ValueError):
    """A ``@job`` execution rule (timeout, retry_on, discard_on, backoff) is invalid."""

    def __init__(self, kind: str, option: str, value: object, message: str) -> None:
        self.kind = kind
        self.option = option
        self.value = value
        super().__init__(f"job {kind!r}: {option}={value!r} {message}")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class Backoff:
    """A named curve: ``exponential`` waits ``base * factor ** attempt`` seconds, ``linear``
    ``base + factor * attempt``, ``constant`` ``base``; then adds up to ``jitter`` (a fraction,
    0 to 1) of that at random, and waits at most ``cap`` seconds."""

    curve: Literal["exponential", "linear", "constant"] = "exponential"
    base: float = 1.0
    factor: float = 2.0
    jitter: float = 0.25
    cap: float = MAX_BACKOFF

    def problem(self) -> str | None:
        """What is wrong with this curve, or None."""
        if self.curve not in CURVES:
            return f"has curve {self.curve!r}; use one of {', '.join(CURVES)}"
        if not _number(self.base) or self.base < 0:
            return f"has base {self.base!r}; use a number of seconds of at least 0"
        if not _number(self.factor) or self.factor < (1 if self.curve == "exponential" else 0):
            low = 1 if self.curve == "exponential" else 0
            return f"has factor {self.factor!r}; use a number of at least {low}"
        if not _number(self.jitter) or not 0 <= self.jitter <= 1:
            return f"has jitter {self.jitter!r}; use a fraction from 0 to 1"
        if not _number(self.cap) or not 0 < self.cap <= BACKOFF_CAP_MAX:
            return f"has cap {self.cap!r}; use seconds above 0, at most {BACKOFF_CAP_MAX:.0f} (365 days)"
        return None

    def raw(self, attempt: int) -> float:
        """The curve's delay before jitter, capped."""
        if self.curve == "constant":
            delay = self.base
        elif self.curve == "linear":
            delay = self.base + self.factor * attempt
        else:
            try:
                delay = self.base * self.factor ** min(attempt, 10_000)
            except OverflowError:
                delay = math.inf
        return min(delay, self.cap)

    def __call__(self, attempt: int, rng: random.Random | None = None) -> float:
        delay = self.raw(attempt)
        return min(delay + (rng or random).uniform(0, self.jitter * delay), self.cap)


DEFAULT_BACKOFF = Backoff()

BackoffRule = Backoff | Callable[[int], float]


@dataclass(frozen=True, slots=True)
class Decision:
    """What a failed attempt does next: ``retryable`` after ``delay`` seconds, or ``failed``."""

    state: Literal[JobState.RETRYABLE, JobState.FAILED]
    delay: float | None
    rule: str | None  # the per-kind rule that decided, for the error entry; None: the default


def _name(cls: type[BaseException]) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A kind's rules for a failed attempt (see the module docstring)."""

    retry_on: tuple[type[BaseException], ...] = ()
    discard_on: tuple[type[BaseException], ...] = ()
    backoff: BackoffRule = DEFAULT_BACKOFF

    def _match(self, exc: BaseException) -> tuple[str, type[BaseException]] | None:
        """The list and class that decide for ``exc``: the most specific listed class."""
        for cls in type(exc).__mro__:
            if cls in self.discard_on:
                return "discard_on", cls
            if cls in self.retry_on:
                return "retry_on", cls
        return None

    def delay(self, attempt: int, rng: random.Random | None = None) -> tuple[float, str | None]:
        """Seconds before the retry, and a note when the kind's backoff callable could not say."""
        rule = self.backoff
        if isinstance(rule, Backoff):
            return rule(attempt, rng), None
        try:
            seconds = rule(attempt)
        except Exception as exc:
            return DEFAULT_BACKOFF(attempt, rng), f"backoff raised {type(exc).__name__}: {exc}; default curve used"
        if not _number(seconds) or seconds < 0:
            return DEFAULT_BACKOFF(attempt, rng), f"backoff returned {seconds!r}, not seconds >= 0; default curve used"
        return min(float(seconds), BACKOFF_CAP_MAX), None

    def decide(self, exc: BaseException, attempt: int, max_attempts: int, rng: random.Random | None = None) -> Decision:
        """Retry or fail the attempt ``attempt`` that raised ``exc``."""
        match = self._match(exc)
        rule = None if match is None else f"{match[0]} {_name(match[1])}"
        if match is not None and match[0] == "discard_on":
            return Decision(JobState.FAILED, None, rule)
        if attempt >= max_attempts:
            return Decision(
                JobState.FAILED, None, None if rule is None else f"{rule}; attempts used up ({max_attempts})"
            )
        delay, note = self.delay(attempt, rng)
        if note is not None:
            rule = note if rule is None else f"{rule}; {note}"
        return Decision(JobState.RETRYABLE, delay, rule)


DEFAULT_POLICY = RetryPolicy()


def _classes(kind: str, option: str, value: object) -> tuple[type[BaseException], ...]:
    if value is None:
        return ()
    items: Iterable[object] = (value,) if isinstance(value, type) else value  # type: ignore[assignment]
    if isinstance(value, str) or not isinstance(items, Iterable):
        raise RuleError(kind, option, value, "must be an exception class or a tuple of them")
    classes: list[type[BaseException]] = []
    for cls in items:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise RuleError(kind, option, value, f"holds {cls!r}, which is not an exception class")
        classes.append(cls)
    if not classes:
        raise RuleError(kind, option, value, "names no exception class; leave it out instead")
    return tuple(classes)


def check_timeout(kind: str, timeout: object) -> float | None:
    """``timeout=`` as seconds, or None; RuleError unless a number above 0 and at most a year."""
    if timeout is None:
        return None
    if not _number(timeout) or not 0 < timeout <= TIMEOUT_MAX:  # type: ignore[operator]
        raise RuleError(kind, "timeout", timeout, f"must be seconds above 0, at most {TIMEOUT_MAX:.0f} (365 days)")
    return float(timeout)  # type: ignore[arg-type]


def policy(kind: str, *, retry_on: object = None, discard_on: object = None, backoff: object = None) -> RetryPolicy:
    """The kind's RetryPolicy from ``@job``'s options; RuleError naming the bad value and the fix."""
    retry = _classes(kind, "retry_on", retry_on)
    discard = _classes(kind, "discard_on", discard_on)
    both = sorted(_name(cls) for cls in set(retry) & set(discard))
    if both:
        raise RuleError(kind, "retry_on", retry_on, f"and discard_on both name {', '.join(both)}; keep it in one")
    rule: BackoffRule = DEFAULT_BACKOFF
    if backoff is not None:
        if isinstance(backoff, Backoff):
            problem = backoff.problem()
            if problem is not None:
                raise RuleError(kind, "backoff", backoff, problem)
            rule = backoff
        elif callable(backoff) and not isinstance(backoff, type):
            rule = backoff
        else:
            raise RuleError(
                kind, "backoff", backoff, "must be a callable attempt -> seconds, or a Backoff(curve, base, ...)"
            )
    if not retry and not discard and rule is DEFAULT_BACKOFF:
        return DEFAULT_POLICY
    return RetryPolicy(retry, discard, rule)
