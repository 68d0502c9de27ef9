"""One in-process attempt's record (``JobRun``) and the marker that a handler runs in-process.

Shared by the door of in-process execution (``awa_django.inline``) and its machinery
(``awa_django.inline.attempt``), which names them without importing the door.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from awa_django.states import JobState

_running_inline: ContextVar[bool] = ContextVar("awa_running_inline", default=False)


def running_inline() -> bool:
    """True while a handler runs in-process here (so on the caller's connection, not a worker's)."""
    return _running_inline.get()


@contextmanager
def running_here() -> Iterator[None]:
    """Mark the handler called inside as running in-process (``running_inline`` is then true)."""
    token = _running_inline.set(True)
    try:
        yield
    finally:
        _running_inline.reset(token)


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt run in-process: the job as claimed, and how the attempt ended."""

    job_id: int
    kind: str
    queue: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    state: JobState
    """The state the attempt left the job in: completed, retryable, scheduled (snoozed, or parked
    in a sleep or a wait with a timeout), waiting (parked in a wait without one), failed or
    cancelled."""
    error: dict[str, Any] | None
    """The error entry appended to the job's ``errors`` (None when it completed or snoozed)."""
    result: Any
    """The handler's return value as stored (decoded JSON), None if it returned nothing."""
    parked: bool = False
    """A durable job's sleep or wait ended the attempt (``state`` scheduled or waiting): it parked,
    its attempt given back."""

    def __str__(self) -> str:
        text = f"job {self.job_id} {self.kind!r} (queue {self.queue!r}) attempt {self.attempt}/{self.max_attempts}"
        text += f" -> {self.state}"
        if self.parked:
            text += " (parked)"
        if self.error is not None:
            text += f": {self.error.get('error')}"
        return text
