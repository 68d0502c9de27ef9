"""The workflow tests' step, run by worker subprocesses: ``demo_wf_node`` records each attempt's
start (by the database clock) as an Execution row, reads its upstream results, and ends as its
``outcome`` says."""

from __future__ import annotations

import os
from typing import Any

from django.db import connection

from awa_django import Cancel, JobContext, RetryAfter, TerminalError, job


@job("demo_wf_node", takes_context=True, max_attempts=3)
def node(context: JobContext, value: int, outcome: str = "success") -> dict[str, Any]:
    """``outcome``: success, fail (terminal), cancel, retry (fails its first attempt), or crash (its
    first attempt kills the worker process: another worker rescues it once its heartbeat is stale)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO demo_execution (job_id, attempt, run_lease, pid, started_at) "
            "VALUES (%s, %s, %s, %s, clock_timestamp())",
            [context.job_id, context.attempt, context.run_lease, os.getpid()],
        )
    seen = {str(u.job_id): u.result["v"] for u in context.upstreams() if u.completed}
    if outcome == "fail":
        raise TerminalError("planned failure")
    if outcome == "cancel":
        raise Cancel("planned cancel")
    if outcome == "crash" and context.attempt == 1:
        os._exit(70)
    if outcome == "retry" and context.attempt == 1:
        raise RetryAfter(0.05, "planned retry")
    return {"v": value, "seen": seen}
