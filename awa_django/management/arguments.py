"""argparse types shared by the commands: each error names the value and the rule."""

from __future__ import annotations

import math
from argparse import ArgumentTypeError

from awa_django.conf import SECONDS_RULE, is_seconds


def seconds(text: str) -> float:
    """A number of seconds above 0."""
    value = _number(text)
    if not is_seconds(value):
        raise ArgumentTypeError(f"{text!r} must be above 0 seconds, {SECONDS_RULE}")
    return value


def seconds_or_zero(text: str) -> float:
    """A number of seconds, 0 or more."""
    value = _number(text)
    if not is_seconds(value, zero_ok=True):
        raise ArgumentTypeError(f"{text!r} must be 0 or more seconds, {SECONDS_RULE}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def global_max_workers(text: str) -> int:
    """--global-max-workers: a whole number from 1 to what the snapshot's integer column holds."""
    from awa_django.defaults import GLOBAL_MAX_WORKERS_MAX

    value = positive_int(text)
    if value > GLOBAL_MAX_WORKERS_MAX:
        raise ArgumentTypeError(f"{text!r} must be at most {GLOBAL_MAX_WORKERS_MAX}")
    return value


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)") from None
    if not 1 <= value <= 65535:
        raise ArgumentTypeError(f"{text!r} is not a port number: use 1 to 65535")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value
