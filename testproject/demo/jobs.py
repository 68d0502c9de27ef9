"""Demo job kinds, registered under the exact names ``noop``, ``stamp``, ``sleep``, ``spin``,
``fail``, ``record``, ``count_atomic``, ``count_plain``, ``noop_sync``, ``noop_atomic``,
``touch_sync``, ``touch_atomic``, ``look_sync``, ``look_atomic`` and ``send_welcome``, and one
periodic job, ``demo_tick`` (``demo_wf_node`` and ``demo_durable_effects`` are in the modules imported below)."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from asgiref.sync import sync_to_async
from django.core.mail import send_mail
from django.db import connection
from django.utils import timezone

from awa_django import JobContext, job
from testproject.demo import durable_jobs as durable_jobs  # registers demo_durable_effects
from testproject.demo import workflow_jobs as workflow_jobs  # registers demo_wf_node
from testproject.demo.models import Execution

logger = logging.getLogger(__name__)


@job("noop")
async def noop(**args: object) -> None:
    """Does nothing, with any args: for throughput measurements and smoke tests."""


@job("stamp")
async def stamp(**args: object) -> float:
    """Does nothing but return the worker's wall clock as it ran: bench/workflows.py reads a chain's
    per-step overhead from these (one worker, one clock), from a step's return to the next one's."""
    return time.time()


@job("sleep")
async def sleep(seconds: float = 1.0) -> None:
    """Sleeps for ``seconds``: a stand-in for I/O-bound work."""
    await asyncio.sleep(float(seconds))


@job("spin")
def spin(loops: int = 100_000) -> int:
    """``loops`` additions in pure Python, holding the GIL throughout: a stand-in for CPU-bound
    work of a fixed size (not of a fixed time, which threads sharing one GIL would each reach while
    doing a fraction of the work). bench/processes.py sizes it to about 2 ms."""
    total = 0
    for i in range(int(loops)):
        total += i
    return total


class DemoFailureError(RuntimeError):
    pass


@job("fail", max_attempts=3)
async def fail(message: str = "the demo job failed on purpose") -> None:
    """Always raises, so its retries and final failure can be watched."""
    raise DemoFailureError(message)


@job("record", takes_context=True)
def record(context: JobContext, seconds: float = 0.0) -> None:
    """Writes an Execution row when it starts and stamps it when it ends (a sync handler: the ORM
    runs in the worker's thread pool). Tests count executions per job id from these rows."""
    execution = Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=os.getpid()
    )
    if seconds:
        time.sleep(float(seconds))
    Execution.objects.filter(pk=execution.pk).update(finished_at=timezone.now())


COUNTER_TABLE = "demo_counter"
"""The table ``count_atomic`` and ``count_plain`` increment: ``(id int PRIMARY KEY, n bigint)`` with
one row, id 1. No migration creates it: the test that counts with it does (test_atomic_chaos)."""


def _count(ms: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE demo_counter SET n = n + 1 WHERE id = 1")
    time.sleep(float(ms) / 1000)


@job("count_atomic", atomic=True, max_attempts=50)
def count_atomic(ms: float = 5.0) -> None:
    """Adds 1 to the demo counter, then works for ``ms`` milliseconds, in one transaction with its
    completion: the counter ends equal to the number of completed jobs, however workers die."""
    _count(ms)


@job("count_plain", max_attempts=50)
def count_plain(ms: float = 5.0) -> None:
    """``count_atomic`` without ``atomic``: the increment commits at once, and a worker killed
    during the work runs the job again, counting it twice."""
    _count(ms)


@job("noop_sync")
def noop_sync() -> None:
    """Does nothing, as a ``def`` handler (in the worker's thread pool): bench/atomic.py's baseline."""


@job("noop_atomic", atomic=True)
def noop_atomic() -> None:
    """Does nothing, atomically: it sends nothing, so its completion goes to the usual writer (bench/atomic.py)."""


def _touch(context: JobContext) -> None:
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=0)


@job("touch_sync", takes_context=True)
def touch_sync(context: JobContext) -> None:
    """Writes one Execution row, as a ``def`` handler: bench/atomic.py's baseline for a handler that writes."""
    _touch(context)


@job("touch_atomic", takes_context=True, atomic=True)
def touch_atomic(context: JobContext) -> None:
    """``touch_sync``, atomically: the row commits with the completion (bench/atomic.py)."""
    _touch(context)


def _look(context: JobContext) -> None:
    Execution.objects.filter(job_id=context.job_id).exists()


@job("look_sync", takes_context=True)
def look_sync(context: JobContext) -> None:
    """Reads once and writes nothing (an "already done?" check), as a ``def`` handler (bench/atomic.py)."""
    _look(context)


@job("look_atomic", takes_context=True, atomic=True)
def look_atomic(context: JobContext) -> None:
    """``look_sync``, atomically: its read began a transaction, so its completion is written in it."""
    _look(context)


@job("send_welcome", queue="emails", max_attempts=5)
async def send_welcome(user_id: int) -> str:
    """Emails a new user (the signup view enqueues it; the testing guide's example runs it)."""
    from django.contrib.auth import get_user_model

    user = await get_user_model().objects.aget(pk=user_id)
    await sync_to_async(send_mail)("Welcome", f"Hello {user.email}!", "noreply@example.com", [user.email])
    return str(user.email)


# A periodic job: every 10 seconds (six fields: seconds first). Declared paused, so the workers
# the test suite starts never fire it; `manage.py demo` resumes it, and the admin can too.
@job(
    "demo_tick",
    cron="*/10 * * * * *",
    timezone="Europe/Paris",
    args={"greeting": "tick"},
    paused=True,
    takes_context=True,
)
async def demo_tick(context: JobContext, greeting: str) -> None:
    """Logs the slot it was fired for (the job's metadata carries the schedule and the slot)."""
    logger.warning(
        "%s schedule=%s fire_at=%s job=%s",
        greeting,
        context.metadata.get("schedule"),
        context.metadata.get("fire_at"),
        context.job_id,
    )


def _poison(context: JobContext, shape: str) -> object:
    """One of the values Postgres refuses, or an exception the worker must not die of."""
    if shape == "result_nul":
        return {"data": "abc\x00def"}
    if shape == "result_surrogate":
        return "\ud800"
    if shape == "raise_nul":
        raise ValueError("\x00")
    if shape == "raise_surrogate":
        raise ValueError("\udcff")
    if shape == "progress_nul":
        context.set_progress({"s": "a\x00b"})
        return None
    if shape == "system_exit":
        raise SystemExit(3)
    if shape == "keyboard_interrupt":
        raise KeyboardInterrupt
    if shape == "generator_exit":
        raise GeneratorExit
    if shape == "cancelled_error":  # raised by the handler itself: nothing cancelled it
        raise asyncio.CancelledError
    raise LookupError(f"unknown poison shape {shape!r}")


@job("poison", max_attempts=1, takes_context=True)
async def poison(context: JobContext, shape: str) -> object:
    """Returns, raises or reports a value the worker must survive (see ``_poison``)."""
    return _poison(context, shape)


@job("poison_sync", max_attempts=1, takes_context=True)
def poison_sync(context: JobContext, shape: str) -> object:
    """``poison`` as a sync handler (run in the worker's thread pool)."""
    return _poison(context, shape)


@job("ignore_cancel")
async def ignore_cancel(seconds: float = 300.0) -> None:
    """Swallows every cancellation and sleeps on: what a careless handler does to a stopping worker."""
    loop = asyncio.get_running_loop()
    until = loop.time() + float(seconds)
    while loop.time() < until:
        try:
            await asyncio.sleep(until - loop.time())
        except asyncio.CancelledError:
            continue
