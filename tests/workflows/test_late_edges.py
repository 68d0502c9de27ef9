"""A step added to a running job while a worker's completion of that job is in flight.

``Workflow.enqueue`` locks an existing upstream ``FOR SHARE`` (lock_upstream_jobs.sql) and counts
its edge as open; a finalising write of that upstream waits for the lock and ends after the edge
commits. Its release must then see the edge, or the new step waits forever: awa_release_jobs reads
the edges in a snapshot of its own, taken after the wait, not the statement's, taken before it
(a guard that skipped the function by a check in the statement's snapshot broke this; 9a2143a,
reverted). Each finalising statement a worker writes a completion with, through a real lock wait
read from pg_stat_activity, not a sleep."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from awa_django.models import Job, JobState
from awa_django.sql import statements
from awa_django.workflows import Workflow
from tests.conftest import connect_outside_django
from tests.harness import wait_until
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers


def finalising(name: str, job_id: int, lease: int) -> tuple[str, dict[str, Any]]:
    """The statement ``name`` completing job ``job_id`` under ``lease``, as the writer sends it."""
    if name == "complete_job":
        return statements[name], {"id": job_id, "lease": lease}
    if name == "complete_jobs":
        return statements[name], {"ids": [job_id], "leases": [lease]}
    return statements[name], {  # finalize_jobs: a completion with a result
        "ids": [job_id],
        "leases": [lease],
        "states": [JobState.COMPLETED.value],
        "delays": [None],
        "errors": [None],
        "refunds": [0],
        "progress": [None],
        "results": ["1"],
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["complete_job", "complete_jobs", "finalize_jobs"])
def test_completion_waiting_on_a_new_steps_lock__releases_the_step(name: str) -> None:
    upstream = Job.objects.enqueue("wf.value", {"value": 1})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job SET state = 'running', attempt = 1, run_lease = run_lease + 1, attempted_at = now(),"
            " heartbeat_at = now() WHERE id = %s RETURNING run_lease",
            [upstream.pk],
        )
        lease = int(cursor.fetchone()[0])
    ended: list[list[int]] = []
    failed: list[BaseException] = []
    worker = connect_outside_django()
    worker_pid = worker.info.backend_pid
    sql, params = finalising(name, upstream.pk, lease)

    def complete() -> None:
        try:
            ended.append([row[0] for row in worker.execute(sql, params).fetchall()])
        except BaseException as exc:  # reported by the test thread
            failed.append(exc)

    writer = threading.Thread(target=complete)
    try:
        with transaction.atomic():
            late = Workflow("late")
            late.add("wf.value", {"value": 2}, after=[upstream.pk])
            late.enqueue()  # the upstream is locked FOR SHARE until this commits
            writer.start()
            with connection.cursor() as cursor:

                def waiting_on_the_lock() -> bool:
                    cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [worker_pid])
                    row = cursor.fetchone()
                    return row is not None and row[0] == "Lock"

                wait_until(waiting_on_the_lock, what=f"{name} waiting for the upstream's lock")
    finally:
        writer.join(30)
        worker.close()
    assert not failed, failed
    assert ended == [[upstream.pk]]
    step = Job.objects.exclude(pk=upstream.pk).get()
    assert (step.state, step.pending) == (JobState.AVAILABLE, 0), (step.state, step.pending)
