"""Run one attempt's handler and turn however it ended into an ``Outcome``.

``async def`` handlers are awaited on the worker's loop; plain ``def`` handlers run in a bounded
thread pool and close their Django connections afterwards. Nothing a handler raises escapes:
every exception becomes an outcome (retry with backoff, fail, snooze, cancel), and so does a
``BaseException`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, a ``CancelledError``
the handler raised itself): only the worker's own signals stop the worker. Only the worker's own
cancellation of the attempt (stopping, handing back) propagates, as ``asyncio.CancelledError``.

Every value of an outcome is storable: a return value Postgres cannot store fails the attempt
with an error naming what is wrong, and error texts and tracebacks have NUL characters and
unpaired surrogates escaped (``storable``).

A sync handler past its deadline cannot be stopped (Python threads cannot be killed): its
attempt ends at the deadline, and ``JobContext.running_thread`` is left set to the thread's
future, so the caller keeps the attempt's slot until the thread really returns.

A durable job's sleep or wait (``durable.Parked``) ends the attempt with the parking outcome
(``JobContext.parked``: scheduled or waiting, its attempt given back), even if the handler caught it.

An atomic handler (``@job(atomic=True)``) runs in a transaction on the jobs' database with its
completion written inside it (``atomic.run_atomic``): its outcome comes back ``settled``, and the
error entry of an attempt that raised says ``"atomic": true`` (its writes were rolled back).
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from typing import Any

from django.db import close_old_connections, connections

from awa_django.conf import awa_settings
from awa_django.context import COMPLETED, ClaimedJob, JobContext, Outcome
from awa_django.durable import Parked
from awa_django.exceptions import Cancel, RetryAfter, Snooze, TerminalError
from awa_django.handlers import Handler as JobHandler  # what the registry holds: a kind's function and rules
from awa_django.handlers import Registry
from awa_django.retry import DEFAULT_BACKOFF, DEFAULT_POLICY
from awa_django.states import JobState
from awa_django.storable import UnreadableJson, escape_json, find_problem
from awa_django.validation import MAX_JSON_DEPTH, UnstorableValueError, storable_json
from awa_django.worker.atomic import ATOMIC_ENTRY_KEY, run_atomic

MAX_BACKOFF = DEFAULT_BACKOFF.cap
TRACEBACK_LIMIT = 20_000
# A sync handler cancelled by the stopping worker gets this long to return with its real outcome.
SYNC_CANCEL_GRACE = 1.0
BINDINGS_KEPT = 1024  # (handler, argument names) pairs whose signature check is remembered


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds before retry by default: 2^attempt plus up to 25 % jitter, at most 24 hours."""
    return DEFAULT_BACKOFF(attempt, rng)


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
    # Error texts are kept, with what Postgres cannot store (NUL, unpaired surrogates) escaped.
    escaped: dict[str, Any] = escape_json(entry)
    return escaped


def describe(exc: BaseException) -> str:
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return f"{name}: {exc}" if str(exc) else name


async def _noting_timeout(call: Any, own: list[BaseException]) -> Any:
    """Await ``call``, recording in ``own`` a TimeoutError it raises (so it is not taken for the deadline)."""
    try:
        return await call
    except TimeoutError as exc:
        own.append(exc)
        raise


class Executor:
    def __init__(self, registry: Registry, sync_threads: int, alias: str | None = None) -> None:
        self.registry = registry
        # The Django connection atomic handlers run their transaction on: the jobs' database
        # (AWA["DATABASE_ALIAS"], read when first needed) unless given.
        self._alias = alias
        self.threads = ThreadPoolExecutor(max_workers=sync_threads, thread_name_prefix="awa-sync")
        self._signatures: dict[int, inspect.Signature] = {}
        # (handler, argument names) -> why they cannot call it, or None: binding depends on the names
        # only, and Signature.bind per job was 5 % of the worker's per-job Python. Bounded: args with
        # ever-new names (a handler taking **kwargs) clear it rather than grow it.
        self._bindings: dict[tuple[int, tuple[str, ...]], str | None] = {}
        self._lock = threading.Lock()
        self.sync_running = 0  # sync handlers still executing in threads (even if abandoned)

    def shutdown(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)

    def _call_sync(self, handler: JobHandler, context: JobContext, args: dict[str, Any]) -> Any:
        with self._lock:
            self.sync_running += 1
        close_old_connections()
        try:
            return self._invoke(handler, context, args)
        finally:
            close_old_connections()
            with self._lock:
                self.sync_running -= 1

    @property
    def alias(self) -> str:
        if self._alias is None:
            self._alias = awa_settings().DATABASE_ALIAS
        return self._alias

    def _invoke(self, handler: JobHandler, context: JobContext, args: dict[str, Any]) -> Any:
        """Call a ``def`` handler in this thread: its return value, or, for an atomic handler, the
        ``settled`` Outcome ``run_atomic`` gives (its completion written in its transaction)."""
        call = partial(handler.func, context, **args) if handler.takes_context else partial(handler.func, **args)
        if handler.atomic:
            return run_atomic(self.alias, call, context, self._completed_with)
        context.atomic_depth = len(connections[self.alias].atomic_blocks)
        return call()

    def _bind_error(self, handler: JobHandler, args: dict[str, Any]) -> str | None:
        """Why these args cannot call the handler (a TypeError a retry would repeat), or None."""
        names = (id(handler.func), tuple(args))
        try:
            return self._bindings[names]
        except KeyError:
            pass
        if len(self._bindings) >= BINDINGS_KEPT:
            self._bindings.clear()
        error = self._bindings[names] = self._bind_error_uncached(handler, args)
        return error

    def _bind_error_uncached(self, handler: JobHandler, args: dict[str, Any]) -> str | None:
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
        if isinstance(job.args, UnreadableJson) or isinstance(job.metadata, UnreadableJson):
            # Written past enqueue's checks (SQL, another producer): every attempt would fail alike.
            unreadable = [name for name in ("args", "metadata") if isinstance(getattr(job, name), UnreadableJson)]
            return Outcome(
                JobState.FAILED,
                error=error_entry(
                    job,
                    f"the job's {' and '.join(unreadable)} nest deeper than Python can read "
                    f"({', '.join(repr(getattr(job, name)) for name in unreadable)}); enqueue refuses JSON nested "
                    f"past {MAX_JSON_DEPTH} levels: write the job again with flatter values",
                ),
            )
        handler = self.registry.get(job.kind)
        if handler is None:
            return Outcome(
                JobState.FAILED,
                error=error_entry(
                    job,
                    f"no handler registered for kind {job.kind!r}; "
                    f"{self.registry.unknown_kind_hint(job.kind, job.metadata)}",
                ),
            )
        if job.args is not None and not isinstance(job.args, dict):  # written past enqueue's checks
            return Outcome(
                JobState.FAILED,
                error=error_entry(
                    job,
                    f"the job's args are a JSON {type(job.args).__name__}, not an object: a handler takes its args "
                    "as keyword arguments, so enqueue takes a dict; write the job again with args as a JSON object",
                ),
            )
        args = job.args or {}
        mismatch = self._bind_error(handler, args)
        if mismatch is not None:
            return Outcome(JobState.FAILED, error=error_entry(job, mismatch))
        outcome = await self._run(job, handler, context, args, deadline)
        if handler.atomic and outcome.error is not None:
            outcome = replace(outcome, error={**outcome.error, ATOMIC_ENTRY_KEY: True})
        return outcome

    async def _run(
        self, job: ClaimedJob, handler: JobHandler, context: JobContext, args: dict[str, Any], deadline: float | None
    ) -> Outcome:
        own: list[BaseException] = []  # a TimeoutError the handler raised itself, not the deadline's
        try:
            if handler.is_async:
                call = handler.func(context, **args) if handler.takes_context else handler.func(**args)
                result = await (call if deadline is None else asyncio.wait_for(_noting_timeout(call, own), deadline))
            else:
                result = await self._run_sync(handler, context, args, deadline)
                if handler.atomic:
                    settled: Outcome = result  # run_atomic's: completed and written, or not a completion
                    return settled
            if context.parked is not None:  # the handler caught its sleep's or wait's Parked and returned
                return context.parked
            return COMPLETED if result is None else self._completed_with(job, result)
        except Parked:  # a durable sleep or wait ended the attempt: the job parks (durable.py)
            assert context.parked is not None
            return context.parked
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # the worker cancelled this attempt (stopping, handing back)
            return self._retry_or_fail(job, f"the handler raised {describe(exc)} itself (nothing cancelled it)", exc)
        except Snooze as snooze:
            return Outcome(JobState.SCHEDULED, delay=snooze.delay, refund=1)
        except RetryAfter as retry:
            if job.attempt >= job.max_attempts:
                return Outcome(JobState.FAILED, error=error_entry(job, describe(retry), retry))
            return Outcome(JobState.RETRYABLE, delay=retry.delay, error=error_entry(job, describe(retry), retry))
        except Cancel as cancel:
            return Outcome(
                JobState.CANCELLED, error=error_entry(job, f"cancelled: {cancel.reason or 'by the handler'}")
            )
        except TerminalError as exc:
            return Outcome(JobState.FAILED, error=error_entry(job, describe(exc), exc))
        except TimeoutError as exc:
            # The deadline's TimeoutError comes from wait_for (async) or _run_sync, which then sets
            # running_thread; any other is the handler's own, reported as what it is.
            if deadline is None or exc in own or (not handler.is_async and context.running_thread is None):
                return self._retry_or_fail(job, describe(exc), exc)
            context.cancel()
            error = f"deadline exceeded: the handler ran longer than {deadline}s"
            if context.running_thread is not None:
                error += "; its thread is still running and keeps its slot until it returns"
            return self._retry_or_fail(job, error, exc)
        except Exception as exc:
            return self._retry_or_fail(job, describe(exc), exc)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit… from the handler
            return self._retry_or_fail(
                job, f"the handler raised {describe(exc)}; recorded as this attempt's failure (the worker runs on)", exc
            )

    async def _run_sync(
        self, handler: JobHandler, context: JobContext, args: dict[str, Any], deadline: float | None
    ) -> Any:
        """The sync handler's return value, from a pool thread. Past the deadline: TimeoutError,
        with ``context.running_thread`` set to the thread's future (it keeps running)."""
        work = self.threads.submit(self._call_sync, handler, context, args)
        future = asyncio.wrap_future(work)
        # Whoever ends up not awaiting it must not leave "exception never retrieved" behind.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait({future}, timeout=deadline)
        except asyncio.CancelledError:
            # Cancelled (the worker stopping): the thread cannot be stopped, so give it a moment to
            # return; if it does, its outcome is real and is kept (handing the attempt back would
            # run finished work again). A second cancellation (a forced stop) ends the wait.
            if work.cancel():  # still queued for a thread: it never starts
                raise
            await asyncio.wait({future}, timeout=SYNC_CANCEL_GRACE)
            if not work.done():
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        if not work.done():
            context.running_thread = future
            raise TimeoutError
        return work.result()

    def _completed_with(self, job: ClaimedJob, result: Any) -> Outcome:
        # storable_json never raises anything but UnstorableValueError (a 5,000-deep list is not a
        # handler failure to retry): the job fails at once, saying why.
        try:
            text = storable_json(result)
        except UnstorableValueError as exc:
            # Say where, when it is a bad character (NUL, a lone surrogate) somewhere inside.
            try:
                where = find_problem(result, "the handler's return value")
            except RecursionError:
                where = None
            return Outcome(
                JobState.FAILED,
                error=error_entry(
                    job,
                    f"the handler returned a value that cannot be stored as JSON ({type(result).__name__}: "
                    f"{exc.reason}){'; ' + where if where else ''}; return None or JSON-serialisable data "
                    "(str, int, float, bool, None, list, dict)",
                ),
            )
        return Outcome(JobState.COMPLETED, result=text)

    def _retry_or_fail(self, job: ClaimedJob, error: str, exc: BaseException) -> Outcome:
        """The kind's retry rules (``awa_django.retry``) decide; the entry names a rule that did."""
        handler = self.registry.get(job.kind)
        decision = (handler.retry if handler is not None else DEFAULT_POLICY).decide(exc, job.attempt, job.max_attempts)
        entry = error_entry(job, error, exc)
        if decision.rule is not None:
            entry["rule"] = escape_json(decision.rule)  # a backoff's error text may hold anything
        return Outcome(decision.state, delay=decision.delay, error=entry)
