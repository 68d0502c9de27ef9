"""awa_django: a Postgres-native background job queue for Django."""

from awa_django.exceptions import (
    AwaError,
    Cancel,
    InvalidJobError,
    InvalidScheduleError,
    RetryAfter,
    Snooze,
    TerminalError,
    UniqueJobConflictError,
)
from awa_django.registry import JobHandler, job, schedule
from awa_django.worker.context import JobContext

__all__ = [
    "AwaError",
    "Cancel",
    "InvalidJobError",
    "InvalidScheduleError",
    "JobContext",
    "JobHandler",
    "RetryAfter",
    "Snooze",
    "TerminalError",
    "UniqueJobConflictError",
    "job",
    "schedule",
]

__version__ = "0.1.0"
