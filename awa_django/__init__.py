"""awa_django: a Postgres-native background job queue for Django.

The public names load on first use (PEP 562 module ``__getattr__``), so importing a part that
needs no Django, such as ``awa_django.concurrency``, does not import Django, the registry or the
worker.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa_django.context import JobContext
    from awa_django.deadlocks import UniqueJobDeadlockError
    from awa_django.exceptions import (
        AwaError,
        Cancel,
        InvalidJobError,
        InvalidScheduleError,
        RestartError,
        RetryAfter,
        SignalError,
        Snooze,
        TerminalError,
        UniqueJobConflictError,
        WaitTimeout,
    )
    from awa_django.registry import JobCall, JobHandler, job, schedule
    from awa_django.retry import Backoff, RuleError

# Each public name and the module that defines it.
_PUBLIC = {
    "AwaError": "awa_django.exceptions",
    "Backoff": "awa_django.retry",
    "JobCall": "awa_django.registry",
    "RuleError": "awa_django.retry",
    "Cancel": "awa_django.exceptions",
    "InvalidJobError": "awa_django.exceptions",
    "InvalidScheduleError": "awa_django.exceptions",
    "RestartError": "awa_django.exceptions",
    "RetryAfter": "awa_django.exceptions",
    "SignalError": "awa_django.exceptions",
    "Snooze": "awa_django.exceptions",
    "TerminalError": "awa_django.exceptions",
    "UniqueJobConflictError": "awa_django.exceptions",
    "UniqueJobDeadlockError": "awa_django.deadlocks",
    "WaitTimeout": "awa_django.exceptions",
    "JobContext": "awa_django.context",
    "JobHandler": "awa_django.registry",
    "job": "awa_django.registry",
    "schedule": "awa_django.registry",
}

__all__ = [
    "AwaError",
    "Backoff",
    "Cancel",
    "InvalidJobError",
    "InvalidScheduleError",
    "JobCall",
    "JobContext",
    "JobHandler",
    "RestartError",
    "RetryAfter",
    "RuleError",
    "SignalError",
    "Snooze",
    "TerminalError",
    "UniqueJobConflictError",
    "UniqueJobDeadlockError",
    "WaitTimeout",
    "job",
    "schedule",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'awa_django' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
