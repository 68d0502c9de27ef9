"""Run ``manage.py awa_worker`` with some of its per-job costs switched off, to weigh each one.

    python bench/floor.py --via bench/worker_toggles.py        # with AWA_TOGGLES=notrace,bindcache,...

A measuring tool, not a configuration: each toggle replaces one piece of the worker's per-job path
with the cheaper version a change to ``awa_django/worker`` would make (or, for ``nojson``, drops
work no no-op job needs), so ``bench/floor.py`` can measure the CPU per job with and without it,
alternated, on the same jobs. ``AWA_TOGGLES`` is a comma-separated list of:

- ``notrace``: no span around each attempt (``tracing.attempt_span`` a null context), as when no
  OpenTelemetry SDK is configured and the worker skips the API's no-op spans;
- ``bindcache``: the handler-signature check (``Executor._bind_error``) done once per (handler,
  argument names) instead of ``Signature.bind`` per job;
- ``noevent``: ``JobContext`` without a ``threading.Event`` until someone cancels;
- ``noname``: attempt tasks created without a per-job name;
- ``gc``: ``gc.freeze()`` after start-up and a gen-0 threshold of 50,000;
- ``nojson``: jsonb columns returned as text (what skipping the decode of args/metadata saves);
- ``noshield``: the attempt awaits its write's future directly, without ``asyncio.shield``;
- ``nolook``: no look-behind (its window look runs every 0.05 s; without it a job made available
  behind a lane cursor is never found, so only for runs where none is, like the pickup one);
- ``nogc``: the cyclic garbage collector off for the whole run;
- ``generic``: the worker's pool connections prepare each statement at its first execution
  (``prepare_threshold`` 0, psycopg's default is the fifth) and plan it once
  (``plan_cache_mode = force_generic_plan``; Postgres's default plans the first five executions of
  a prepared statement each, and one with array parameters at every execution).
- ``nosync``: the worker's connections commit without waiting for the WAL flush
  (``synchronous_commit = off``): what a claim's round trip costs without its commit's flush. Never
  a setting to run with: a claim lost in a server crash would hand its lease number out again.
- ``trace``: changes nothing; records when each NOTIFY reached the listener and when each claim
  was sent, got its pool connection, was executed, had its rows read and gave its connection back
  (with its job ids), ``time.time()``, and writes them as JSON lines to ``AWA_TRACE_OUT`` at exit
  (``bench/pickup_parts.py`` reads them).

Every other argument is passed to ``manage.py`` as is.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import runpy
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def apply(toggles: set[str]) -> None:
    import django

    django.setup()
    from awa_django import context  # the job context moved beside the models (af7d873)
    from awa_django.observability import tracing
    from awa_django.worker import attempts, executor

    if "notrace" in toggles:

        @contextlib.contextmanager
        def no_span(job: Any) -> Iterator[None]:
            yield None

        tracing.attempt_span = no_span  # type: ignore[assignment]
        tracing._trace = None  # end_attempt returns at once

    if "bindcache" in toggles:
        original = executor.Executor._bind_error
        seen: dict[tuple[int, tuple[str, ...]], str | None] = {}

        def cached(self: Any, handler: Any, args: dict[str, Any]) -> str | None:
            key = (id(handler.func), tuple(args))
            if key not in seen:
                seen[key] = original(self, handler, args)
            return seen[key]

        executor.Executor._bind_error = cached  # type: ignore[method-assign]

    if "noevent" in toggles:
        job_context = context.JobContext
        plain_init = job_context.__init__

        def lazy_init(self: Any, job: Any) -> None:
            self.job = job
            self._cancel = None
            self._progress = None
            self._progress_json = None
            self.finishing = False
            self.running_thread = None

        def cancel(self: Any) -> None:
            if self._cancel is None:
                self._cancel = threading.Event()
            self._cancel.set()

        job_context.__init__ = lazy_init  # type: ignore[method-assign]
        job_context.cancel = cancel  # type: ignore[method-assign]
        job_context.cancelled = property(lambda self: self._cancel is not None and self._cancel.is_set())  # type: ignore[method-assign,assignment]
        del plain_init

    if toggles & {"noname", "noshield"}:
        real_create_task = asyncio.create_task

        class _Asyncio:
            """The asyncio the attempts module sees: named tasks and shield, as toggled."""

            def __getattr__(self, name: str) -> Any:
                return getattr(asyncio, name)

            def create_task(self, coro: Any, *, name: str | None = None) -> Any:
                return real_create_task(coro, name=None if "noname" in toggles else name)

            def shield(self, future: Any) -> Any:
                return future if "noshield" in toggles else asyncio.shield(future)

        attempts.asyncio = _Asyncio()  # type: ignore[assignment]

    if "gc" in toggles:
        from awa_django.worker import supervisor

        run = supervisor.Worker.run

        async def run_frozen(self: Any) -> None:
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 100)
            await run(self)

        supervisor.Worker.run = run_frozen  # type: ignore[method-assign]

    if "nolook" in toggles:
        from awa_django.worker import lookbehind

        lookbehind.WINDOW_LOOK_EVERY = lookbehind.FULL_LOOK_EVERY = 1e9

    if "nogc" in toggles:
        gc.disable()

    if "generic" in toggles:
        _connect_with(prepare_threshold=0, options="-c plan_cache_mode=force_generic_plan")

    if "nosync" in toggles:
        _connect_with(options="-c synchronous_commit=off")

    if "trace" in toggles:
        trace()

    if "nojson" in toggles:
        import psycopg
        from psycopg.types.string import TextLoader

        psycopg.adapters.register_loader("jsonb", TextLoader)


def _connect_with(options: str, **kwargs: Any) -> None:
    """The worker's connections (its pool's, and connect()'s: the leader, LISTEN) made with these
    server ``options`` added and these psycopg keyword arguments."""
    from awa_django.worker import db

    made_with = db.connection_kwargs

    def connection_kwargs(alias: str) -> dict[str, Any]:
        made = {**made_with(alias), **kwargs}
        made["options"] = f"{made.get('options', '')} {options}".strip()
        return made

    db.connection_kwargs = connection_kwargs


def trace() -> None:
    """The ``trace`` toggle: see the module docstring."""
    import atexit
    import json
    import time

    from awa_django.sql import statements
    from awa_django.worker import claims, listener, plain

    events: list[list[Any]] = []
    on_notify = listener.Listener.on_notify

    def heard(self: Any, channel: str, payload: str) -> None:
        events.append(["notify", time.time(), channel, payload])
        on_notify(self, channel, payload)

    async def run_statement(pool: Any, claim: Any) -> list[Any]:
        sent = time.time()
        async with pool.connection() as conn:
            pooled = time.time()
            async with conn.cursor(row_factory=claim.rows) as cur:
                await cur.execute(statements[claim.statement], claim.params)
                executed = time.time()
                rows: list[Any] = await cur.fetchall()
                fetched = time.time()
        events.append(["claim", sent, pooled, executed, fetched, time.time(), [row.id for row in rows]])
        return rows

    def dump() -> None:
        with open(os.environ["AWA_TRACE_OUT"], "w") as out:
            out.writelines(json.dumps(event) + "\n" for event in events)

    listener.Listener.on_notify = heard  # type: ignore[method-assign]
    claims.run_statement = run_statement
    plain.run_statement = run_statement  # type: ignore[attr-defined]  # imported there by name
    atexit.register(dump)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    toggles = {t for t in os.environ.get("AWA_TOGGLES", "").split(",") if t}
    apply(toggles)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
