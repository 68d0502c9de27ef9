"""Handlers for the testing helpers' tests, registered under kinds starting with ``testing.``.

Side effects are Execution rows (testproject.demo): a test sees them in its own transaction.
"""

from __future__ import annotations

from typing import Any

from awa_django import Cancel, JobContext, RetryAfter, Snooze, TerminalError, WaitTimeout, job
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


@job("testing.nap", takes_context=True)
def nap(context: JobContext, hours: list[float]) -> list[int]:
    """A durable job: a step, then a sleep of each of ``hours`` with a step after it; returns the
    Execution ids of its steps (each step writes one, so a step that ran twice shows)."""

    def mark(attempt: int) -> int:
        return Execution.objects.create(job_id=context.job_id, attempt=attempt, run_lease=context.run_lease, pid=0).pk

    done = [context.step("first", mark, context.attempt)]
    for index, length in enumerate(hours):
        context.sleep(length * 3600)
        done.append(context.step(f"after-sleep-{index}", mark, context.attempt))
    return done


@job("testing.nap_async", takes_context=True)
async def nap_async(context: JobContext, hours: float) -> str:
    await context.asleep(hours * 3600)
    return await context.astep("after", lambda: "woke")


@job("testing.approve", takes_context=True)
def approve(context: JobContext, timeout_hours: float | None = None) -> Any:
    """A durable job that waits for "approved" (with a timeout, if given)."""
    try:
        return context.wait_for("approved", timeout=None if timeout_hours is None else timeout_hours * 3600)
    except WaitTimeout:
        return "timed out"


@job("orders.remind", takes_context=True)
def remind(context: JobContext, order_id: int) -> Any:
    """The testing guide's durable example: sleeps a day, then waits for "paid"."""
    context.sleep(24 * 3600)
    return {"order": order_id, "paid": context.wait_for("paid")}
