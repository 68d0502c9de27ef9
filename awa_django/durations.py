"""Durations as operators type them: ``600`` (seconds), ``10m``, ``1h30m``, ``00:10:00``.

One parser and one describer for every place a person enters or reads a duration (the Queue
admin's deadline and priority aging): ``parse`` takes all three forms, ``describe`` writes the
compact one back (``10m``, ``1h 30m``, ``45s``, ``2d 4h``), which ``parse`` reads again.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils.dateparse import parse_duration

_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_COMPACT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms])\s*")
HELP = "A duration: 600 (seconds), 10m, 1h30m or 00:10:00."


def parse(text: str) -> timedelta | None:
    """The duration ``text`` names, or None when it is not one (the caller says why)."""
    text = text.strip()
    if not text:
        return None
    position, seconds, matched = 0, 0.0, False
    for match in _COMPACT.finditer(text.lower()):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position, matched = match.end(), True
    if matched and position == len(text):
        return timedelta(seconds=seconds)
    return parse_duration(text)  # 600, 00:10:00, "1 00:00:00", ISO 8601


def describe(value: timedelta) -> str:
    """``value`` in the compact form (``10m``, ``1h 30m``, ``45s``): a negative or sub-second
    value keeps Django's ``HH:MM:SS.ffffff`` form so that nothing is rounded away."""
    total = value.total_seconds()
    if total < 0 or value.microseconds:
        return str(value)
    if total == 0:
        return "0s"
    parts, left = [], int(total)
    for unit, size in _UNITS.items():
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts)
