"""Every error awa_django raises on purpose.

Each carries the offending values as attributes, and its message names the value,
the allowed range and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

from awa_django.validation import brief


class AwaError(Exception):
    """Base class of every awa_django error.

    All are defined here but one: ``UniqueJobDeadlockError`` (``awa_django.deadlocks``, also
    ``awa_django.UniqueJobDeadlockError``) is a ``django.db.OperationalError`` too, and this
    module imports no Django (the concurrency package raises its errors where Django cannot load)."""


# --- enqueue -----------------------------------------------------------------------


class InvalidJobError(AwaError, ValueError):
    """A job spec failed validation; nothing was written."""

    def __init__(self, field: str, value: object, message: str, *, index: int | None = None) -> None:
        self.field = field
        self.value = value
        self.index = index
        where = f"job spec #{index}: " if index is not None else ""
        # brief(): a 20 MB string or a 10,000-deep list must not be copied into the message.
        super().__init__(f"{where}{field}={brief(value)}: {message}")


class UniqueJobConflictError(AwaError):
    """A unique job already exists in one of the states its uniqueness is enforced in."""

    def __init__(
        self, kind: str, existing_ids: Sequence[int], unique_key: str, *, spec_index: int | None = None
    ) -> None:
        self.kind = kind
        self.existing_ids = list(existing_ids)
        self.existing_id = self.existing_ids[0] if self.existing_ids else None
        self.unique_key = unique_key
        self.spec_index = spec_index
        if spec_index is not None:
            message = (
                f"job spec #{spec_index} of kind {kind!r} duplicates an earlier spec of the same call; "
                "nothing was written: drop the duplicate, or enqueue without unique= to allow duplicates"
            )
        else:
            ids = ", ".join(str(i) for i in self.existing_ids) or "(committed concurrently, id not visible)"
            message = (
                f"a unique job of kind {kind!r} already exists (job id {ids}); "
                "wait for it to finish, or enqueue without unique= to allow duplicates"
            )
        super().__init__(message)


# --- capacity configuration (the concurrency rules) ---------------------------------


class ConfigurationError(AwaError, ValueError):
    """The worker/queue configuration breaks a concurrency rule."""


class MinWorkersExceedGlobalError(ConfigurationError):
    def __init__(self, sum_min_workers: int, global_max_workers: int) -> None:
        self.sum_min_workers = sum_min_workers
        self.global_max_workers = global_max_workers
        super().__init__(
            f"sum of min_workers ({sum_min_workers}) exceeds global_max_workers "
            f"({global_max_workers}); lower some queue's min_workers or raise global_max_workers"
        )


class InvalidWeightError(ConfigurationError):
    def __init__(self, queue: str, weight: object) -> None:
        self.queue = queue
        self.weight = weight
        super().__init__(f"queue {queue!r}: weight {weight!r} is invalid; weight must be an integer of at least 1")


class InvalidRateLimitError(ConfigurationError):
    def __init__(self, queue: str, rate: object) -> None:
        self.queue = queue
        self.rate = rate
        super().__init__(
            f"queue {queue!r}: rate limit {rate!r} jobs/s is invalid; "
            "use a number above 0, or leave it unset for no limit"
        )


class InvalidWorkersError(ConfigurationError):
    def __init__(self, queue: str, field: str, value: object, minimum: int) -> None:
        self.queue = queue
        self.field = field
        self.value = value
        self.minimum = minimum
        super().__init__(f"queue {queue!r}: {field} {value!r} is invalid; it must be an integer of at least {minimum}")


# --- handler outcomes (raised by job handlers) --------------------------------------


class JobOutcome(AwaError):  # noqa: N818 - control flow, not an error
    """Raised by a handler to choose its job's next state."""


class Snooze(JobOutcome):
    """Run again after `delay` seconds without consuming an attempt."""

    def __init__(self, delay: float) -> None:
        self.delay = float(delay)
        super().__init__(f"snoozed for {self.delay}s")


class RetryAfter(JobOutcome):
    """Retry after `delay` seconds, consuming an attempt."""

    def __init__(self, delay: float, reason: str = "") -> None:
        self.delay = float(delay)
        self.reason = reason
        super().__init__(reason or f"retry after {self.delay}s")


class Cancel(JobOutcome):
    """Stop the job for good: it ends cancelled."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason or "cancelled by handler")


class TerminalError(AwaError):
    """Subclass (or raise) this for errors that retrying cannot fix: the job fails at once."""


# --- durable jobs (context.step, sleep, wait_for; Job.objects.signal) ---------------------


class StepError(TerminalError):
    """A durable job's step was used in a way a retry cannot fix: the job fails at once, with this
    message. ``job_id`` and ``step`` (the step's name) say where."""

    def __init__(self, job_id: int, step: str, message: str) -> None:
        self.job_id = job_id
        self.step = step
        super().__init__(f"job {job_id}, step {step!r}: {message}")


class DuplicateStepError(StepError):
    """A step name was used twice in one run of a handler; step names are unique within a job."""

    def __init__(self, job_id: int, step: str) -> None:
        super().__init__(
            job_id,
            step,
            "this step name was already used in this run of the handler; give each step of a job its own "
            'name (e.g. f"charge:{item_id}" in a loop)',
        )


class StepKindMismatchError(StepError):
    """A step name is stored as one kind (step, sleep, wait) and used now as another: the handler's
    code changed while the job was parked, and the name now means something else."""

    def __init__(self, job_id: int, step: str, stored: str, used: str) -> None:
        self.stored = stored
        self.used = used
        super().__init__(
            job_id,
            step,
            f"stored as a {stored}, used now as a {used} (the code changed while the job was parked); "
            "give the new one a new name",
        )


class UnstorableStepResultError(StepError):
    """A step returned a value Postgres cannot store; ``reason`` says what is wrong with it."""

    def __init__(self, job_id: int, step: str, reason: str) -> None:
        self.reason = reason
        super().__init__(job_id, step, f"{reason}; the step's work ran, but its result was not stored")


class WaitTimeout(AwaError):  # noqa: N818 - named for what happened, as TimeoutError is
    """``context.wait_for(event, timeout=…)`` reached its deadline with no event. Recorded, so every
    later attempt of the job raises it again at the same wait; catch it to go on without the event."""

    def __init__(self, job_id: int, step: str, event: str) -> None:
        self.job_id = job_id
        self.step = step
        self.event = event
        super().__init__(f"job {job_id}: no event {event!r} came before the timeout of wait {step!r}")


class SignalError(AwaError, LookupError):
    """A signal to a job that cannot receive it: ``state`` is None when no job ``job_id`` exists,
    else its finished state (completed, failed, cancelled)."""

    def __init__(self, job_id: int, event: str, state: str | None) -> None:
        self.job_id = job_id
        self.event = event
        self.state = state
        if state is None:
            why = "no such job exists (never enqueued, or deleted by retention)"
        else:
            why = f"it has finished (state {state}); only a job that has not finished can receive an event"
        super().__init__(f"cannot send event {event!r} to job {job_id}: {why}")


class RestartError(AwaError, LookupError):
    """A durable job cannot be restarted from step ``step`` (``restart_from_step``): it does not
    exist, it is running, or it has no step of that name. ``state`` is the job's state (None when
    no job ``job_id`` exists)."""

    def __init__(self, job_id: int, step: str, state: str | None, why: str) -> None:
        self.job_id = job_id
        self.step = step
        self.state = state
        super().__init__(f"cannot restart job {job_id} from step {step!r}: {why}")


# --- periodic jobs ------------------------------------------------------------------


class InvalidScheduleError(AwaError, ValueError):
    """A schedule's cron expression, time zone or missed-fire policy is invalid."""

    def __init__(
        self, expression: object, timezone: object, message: str, *, name: str | None = None, field: str = "cron"
    ) -> None:
        self.expression = expression
        self.timezone = timezone
        self.name = name
        self.field = field  # the schedule field at fault: cron, timezone, missed, catch_up_limit, …
        where = f"schedule {name!r}: " if name else ""
        what = f"cron {expression!r} ({timezone}): " if expression is not None else ""
        super().__init__(f"{where}{what}{message}")


# --- worker control ----------------------------------------------------------------


class WorkerRequestError(AwaError, ValueError):
    """A request to a worker that cannot be sent: the worker is gone or stopping, or it does not
    serve the queue named, or the queue is not in the state the request assumes."""

    def __init__(self, worker: str, message: str) -> None:
        self.worker = worker
        super().__init__(message)
