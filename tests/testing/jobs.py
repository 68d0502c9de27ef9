"""Handlers for the testing helpers' tests, registered under kinds starting with ``testing.``.

Side effects are Execution rows (testproject.demo): a test sees them in its own transaction.
"""

from __future__ import annotations

from typing import Any

from awa_django import Cancel, JobContext, RetryAfter, Snooze, TerminalError, job
from awa_django.models import Job
from testproject.demo.models import Execution


@job("testing.add")
def add(a: int, b: int) -> int:
    return a + b


@job("testing.add_async")
async def add_async(a: int, b: int) -> int:
    return a + b


@job("testing.touch", takes_context=True)
def touch(context: JobContext) -> int:
    """A sync handler's ORM write: an Execution row for this attempt; returns its id."""
    row = Execution.objects.create(job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=0)
    return row.pk


@job("testing.touch_async", takes_context=True)
async def touch_async(context: JobContext) -> int:
    """An async handler's ORM write, through Django's async ORM (sync_to_async underneath)."""
    row = await Execution.objects.acreate(
        job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=0
    )
    return row.pk


@job("testing.flaky", takes_context=True, max_attempts=5)
def flaky(context: JobContext, fail_attempts: int) -> str:
    """Fails its first ``fail_attempts`` attempts, then succeeds."""
    if context.attempt <= fail_attempts:
        raise ValueError(f"attempt {context.attempt} fails on purpose")
    return f"succeeded on attempt {context.attempt}"


class BoomError(RuntimeError):
    pass


@job("testing.boom", max_attempts=2)
def boom(message: str = "boom") -> None:
    raise BoomError(message)


@job("testing.boom_async", max_attempts=2)
async def boom_async(message: str = "boom") -> None:
    raise BoomError(message)


@job("testing.terminal")
def terminal() -> None:
    raise TerminalError("card declined")


@job("testing.cancel")
def cancel() -> None:
    raise Cancel("no longer needed")


@job("testing.snooze")
def snooze(seconds: float) -> None:
    raise Snooze(seconds)


@job("testing.retry_after")
def retry_after(seconds: float) -> None:
    raise RetryAfter(seconds)


@job("testing.parent")
def parent(children: int) -> list[int]:
    """Enqueues ``children`` testing.add jobs (in its own transaction, as a worker's handler does)."""
    return [Job.objects.enqueue("testing.add", {"a": i, "b": 1}).pk for i in range(children)]


@job("testing.parent_async")
async def parent_async(children: int) -> list[int]:
    return [(await Job.objects.aenqueue("testing.add_async", {"a": i, "b": 1})).pk for i in range(children)]


@job("testing.forever")
def forever() -> None:
    """Enqueues itself: a chain without end."""
    Job.objects.enqueue("testing.forever")


@job("testing.progress", takes_context=True)
def progress(context: JobContext, steps: int) -> dict[str, Any]:
    for step in range(steps):
        context.set_progress({"step": step + 1})
    return {"steps": steps}
