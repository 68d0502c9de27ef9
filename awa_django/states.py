"""Job states: the one place their names are spelled in Python.

Django-free, so the worker, the concurrency core and the SQL layer can import it without loading
models. ``awa_django.models.Job.state`` takes its choices from ``JobState``; the SQL files keep
their own literals, because the partial indexes are declared on them and the planner matches a
query to a partial index only through a literal.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life (docs/design.md, "Lifecycle")."""

    # Waits for its upstream jobs (a workflow step), or for an event with no timeout (a durable
    # job's wait_for): in no claim index.
    WAITING = "waiting"
    SCHEDULED = "scheduled"  # waits for run_at (a durable job's sleep, a wait's timeout)
    AVAILABLE = "available"  # due: claimable
    RUNNING = "running"  # claimed by a worker, under a run_lease
    COMPLETED = "completed"  # terminal: the handler returned
    RETRYABLE = "retryable"  # failed an attempt; runs again at run_at
    FAILED = "failed"  # terminal: attempts exhausted, or failed for good
    CANCELLED = "cancelled"  # terminal: cancelled before or while running

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES: frozenset[JobState] = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

# The states a finished attempt can move its job to (``Outcome.state``): running is never one;
# waiting only for a durable job parked in a wait.
OUTCOME_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.RETRYABLE, JobState.SCHEDULED, JobState.WAITING, JobState.FAILED, JobState.CANCELLED}
)

# The model field's choices: value and label are the state's name.
CHOICES: list[tuple[str, str]] = [(state.value, state.value) for state in JobState]
