"""A finished job's ``finalized_at`` is when its attempt ended, not when the transaction that
wrote its outcome began: the history rollup closes a minute ``HISTORY_GRACE`` seconds after it
ends, assuming "a finalising transaction stamps finalized_at when it starts and commits a moment
later" (worker/history.py). An atomic handler's completion is written in the handler's own
transaction, which began at the handler's first query: stamped with that transaction's now(), a
handler that ran for minutes after its first query lands in a minute the rollup already closed
(never counted) and reads a run time of its first query's, not its whole attempt's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext
from tests.harness import make_config, running_worker
from tests.worker.support import wait_for_row

QUEUE = "atomic_finish_time"


@pytest.mark.django_db(transaction=True)
def test_atomic_completion__finalized_at_is_not_before_the_handlers_last_statement() -> None:
    seen: dict[str, datetime] = {}

    def handler(context: JobContext) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")  # the handler's transaction begins here
            seen["began"] = cursor.fetchone()[0]
            # ... the handler's work (a call to a payment API, minutes in production) ...
            cursor.execute("SELECT clock_timestamp()")
            seen["ended"] = cursor.fetchone()[0]

    registry = Registry()
    registry.register(JobHandler("finish_time", handler, queue=QUEUE, takes_context=True, atomic=True))
    with running_worker(make_config([QUEUE]), registry=registry):
        job_id = Job.objects.enqueue("finish_time", {}, queue=QUEUE).id
        row: Any = wait_for_row(job_id, state="completed")
    assert seen["began"] < seen["ended"]
    assert row.finalized_at >= seen["ended"], (
        f"finalized_at {row.finalized_at} is the handler transaction's start {seen['began']}, "
        f"before the handler's last statement at {seen['ended']}"
    )
