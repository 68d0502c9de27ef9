"""The durable-job tests' handler, run by worker subprocesses: ``demo_durable_effects`` runs its
steps, each of which records its side effect as a row of ``demo_step_effect`` on a connection of
its own (autocommit, outside the job's transaction and the step's record), so that a test counts,
from the database, how many times each step's function ran, in which attempt and which process.

``demo_step_effect``: ``(id bigserial PRIMARY KEY, job_id bigint, step text, attempt int,
run_lease bigint, pid int, at timestamptz)``. No migration creates it: the tests that count with it
do (tests/durable/test_chaos.py, tests/pooler/test_durable_pooler.py)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from django.db import connection

from awa_django import JobContext, job

EFFECT_TABLE = "demo_step_effect"
EFFECT_COLUMNS = (
    "id bigserial PRIMARY KEY, job_id bigint NOT NULL, step text NOT NULL, attempt int NOT NULL, "
    "run_lease bigint NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()"
)
"""The table's columns, for the tests' CREATE TABLE."""

_local = threading.local()  # each handler thread's own connection for the effects


def _effects() -> Any:
    """This thread's autocommit connection to the jobs' database, opened at its first effect: not
    Django's connection, so an effect commits at once whatever the handler's transaction does."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = connection.get_new_connection(connection.get_connection_params())
        conn.autocommit = True
        _local.conn = conn
    return conn


def _effect(context: JobContext, step: str, ms: float, hold: bool) -> int:
    """The step's side effect: a row, committed before anything else. With ``hold``, it then waits
    for the advisory lock keyed by the job's id (the test that holds it decides when the step may
    end), taken and released within one statement. Then ``ms`` milliseconds of work. Returns the
    row's id: the step's result names the execution whose record was kept."""
    conn = _effects()
    row = conn.execute(
        "INSERT INTO demo_step_effect (job_id, step, attempt, run_lease, pid) VALUES (%s, %s, %s, %s, %s) RETURNING id",
        [context.job_id, step, context.attempt, context.run_lease, os.getpid()],
    ).fetchone()
    if hold:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [context.job_id])
    if ms:
        time.sleep(float(ms) / 1000)
    return int(row[0])


@job("demo_durable_effects", takes_context=True, max_attempts=50)
def durable_effects(
    context: JobContext,
    steps: int = 3,
    ms: float = 0.0,
    durable: bool = True,
    sleep: float | None = None,
    wait: str | None = None,
    hold: int = 0,
) -> dict[str, Any]:
    """Steps ``s1``…``sN``, each an ``_effect``; with ``durable=False`` (the control) the same
    effects are called directly, not as steps. After step ``steps // 2``: a durable sleep of
    ``sleep`` seconds, then a wait for the event ``wait``, when given. Step number ``hold`` waits
    for the test's advisory lock. Returns the effects' row ids by step, and the wait's payload."""
    effects: dict[str, int] = {}
    payload = None
    for i in range(1, steps + 1):
        name = f"s{i}"
        if durable:
            effects[name] = context.step(name, _effect, context, name, ms, i == hold)
        else:
            effects[name] = _effect(context, name, ms, i == hold)
        if i == steps // 2:
            if sleep is not None:
                context.sleep(sleep)
            if wait is not None:
                payload = context.wait_for(wait)
    return {"effects": effects, "payload": payload}
