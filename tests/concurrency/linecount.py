"""Work counted in lines run, not seconds: a cost that must not grow with a setting is asserted
as the same operation count at a small and a large value, the same on every machine."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


def lines_run(where: str, call: Callable[[], object]) -> int:
    """How many lines of the source files whose path starts with ``where`` ``call()`` runs."""
    count = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(where):
            return None
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(None)
    return count
