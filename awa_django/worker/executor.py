"""Run one attempt's handler and turn however it ended into an ``Outcome``.

``async def`` handlers are awaited on the worker's loop; plain ``def`` handlers run in a bounded
thread pool and close their Django connections afterwards. Nothing a handler raises escapes:
every exception becomes an outcome (retry with backoff, fail, snooze, cancel). Only
``asyncio.CancelledError`` (the worker stopping) propagates.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import threading
import traceback
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from django.db import close_old_connections

from awa_django.exceptions import Cancel, RetryAfter, Snooze, TerminalError
from awa_django.registry import JobHandler, Registry
from awa_django.validation import UnstorableValueError, storable_json
from awa_django.worker.context import COMPLETED, ClaimedJob, JobContext, Outcome

MAX_BACKOFF = 24 * 3600.0
TRACEBACK_LIMIT = 20_000


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds before retry: 2^attempt plus up to 25 % jitter, at most 24 hours."""
    base = 2.0 ** min(attempt, 32)
    jitter = (rng or random).uniform(0, 0.25 * base)
    return min(base + jitter, MAX_BACKOFF)


def error_entry(job: ClaimedJob, error: str, exc: BaseException | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "error": error,
        "attempt": job.attempt,
        "at": datetime.now(timezone.utc).isoformat(),
    }
    if exc is not None:
        cls = type(exc)
        entry["exception"] = f"{cls.__module__}.{cls.__qualname__}"
        entry["traceback"] = "".join(traceback.format_exception(exc))[-TRACEBACK_LIMIT:]
    return entry


def describe(exc: BaseException) -> str:
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return f"{name}: {exc}" if str(exc) else name


class Executor:
    def __init__(self, registry: Registry, sync_threads: int) -> None:
        self.registry = registry
        self.threads = ThreadPoolExecutor(max_workers=sync_threads, thread_name_prefix="awa-sync")
        self._signatures: dict[int, inspect.Signature] = {}
        self._lock = threading.Lock()
        self.sync_running = 0  # sync handlers still executing in threads (even if abandoned)

    def shutdown(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)

    def _call_sync(self, handler: JobHandler, context: JobContext, args: dict[str, Any]) -> Any:
        with self._lock:
            self.sync_running += 1
        close_old_connections()
        try:
            if handler.takes_context:
                return handler.func(context, **args)
            return handler.func(**args)
        finally:
            close_old_connections()
            with self._lock:
                self.sync_running -= 1

    def call_sync(self, handler: JobHandler, context: JobContext, args: dict[str, Any]) -> Awaitable[Any]:
        """Start a plain ``def`` handler: here in the thread pool. A seam: ``awa_django.inline`` runs it
        in the caller's thread instead, on the caller's Django connection."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self.threads, functools.partial(self._call_sync, handler, context, args))

    def _bind_error(self, handler: JobHandler, args: dict[str, Any]) -> str | None:
        """Why these args cannot call the handler (a TypeError a retry would repeat), or None."""
        key = id(handler.func)
        signature = self._signatures.get(key)
        if signature is None:
            signature = self._signatures[key] = inspect.signature(handler.func)
        try:
            if handler.takes_context:
                signature.bind(None, **args)
            else:
                signature.bind(**args)
        except TypeError as exc:
            return f"args {sorted(args)} do not match handler {handler.func.__qualname__}{signature}: {exc}"
        return None

    async def execute(self, job: ClaimedJob, context: JobContext, deadline: float | None) -> Outcome:
        handler = self.registry.get(job.kind)
        if handler is None:
            return Outcome(
                "failed",
                error=error_entry(
                    job,
                    f"no handler registered for kind {job.kind!r}; register one with "
                    f"@job({job.kind!r}) in an installed app's jobs.py",
                ),
            )
        args = job.args if isinstance(job.args, dict) else {}
        mismatch = self._bind_error(handler, args)
        if mismatch is not None:
            return Outcome("failed", error=error_entry(job, mismatch))
        try:
            if handler.is_async:
                call = handler.func(context, **args) if handler.takes_context else handler.func(**args)
                result = await (call if deadline is None else asyncio.wait_for(call, deadline))
            else:
                future = self.call_sync(handler, context, args)
                result = await (future if deadline is None else asyncio.wait_for(future, deadline))
            return COMPLETED if result is None else self._completed_with(job, result)
        except asyncio.CancelledError:
            raise
        except Snooze as snooze:
            return Outcome("scheduled", delay=snooze.delay, refund=1)
        except RetryAfter as retry:
            if job.attempt >= job.max_attempts:
                return Outcome("failed", error=error_entry(job, describe(retry), retry))
            return Outcome("retryable", delay=retry.delay, error=error_entry(job, describe(retry), retry))
        except Cancel as cancel:
            return Outcome("cancelled", error=error_entry(job, f"cancelled: {cancel.reason or 'by the handler'}"))
        except TerminalError as exc:
            return Outcome("failed", error=error_entry(job, describe(exc), exc))
        except TimeoutError as exc:
            context.cancel()
            return self._retry_or_fail(job, f"deadline exceeded: the handler ran longer than {deadline}s", exc)
        except Exception as exc:
            return self._retry_or_fail(job, describe(exc), exc)

    def _completed_with(self, job: ClaimedJob, result: Any) -> Outcome:
        # storable_json never raises anything but UnstorableValueError (a 5,000-deep list is not a
        # handler failure to retry): the job fails at once, saying why.
        try:
            text = storable_json(result)
        except UnstorableValueError as exc:
            return Outcome(
                "failed",
                error=error_entry(
                    job,
                    f"the handler returned a value that cannot be stored as JSON ({type(result).__name__}: "
                    f"{exc.reason}); return None or JSON-serialisable data (str, int, float, bool, None, list, dict)",
                ),
            )
        return Outcome("completed", result=text)

    def _retry_or_fail(self, job: ClaimedJob, error: str, exc: BaseException) -> Outcome:
        entry = error_entry(job, error, exc)
        if job.attempt >= job.max_attempts:
            return Outcome("failed", error=entry)
        return Outcome("retryable", delay=backoff(job.attempt), error=entry)
