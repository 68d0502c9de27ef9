"""restart_from_step: forget a step and the steps after it (by started_at), then run the job again
from the top; a finished or a parked job, never a running one; one transaction, the row locked."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection, transaction

from awa_django import RestartError
from awa_django.models import Job, JobStep
from awa_django.services.steps import restart_from_step
from awa_django.sql import statements
from awa_django.worker import JobContext
from tests.durable.support import expire, registry_of, run_once, state_of, steps_of

QUEUE = "durable"
ran: Counter[tuple[int, str]] = Counter()


def _three(context: JobContext) -> Any:
    def count(name: str) -> str:
        ran.update([(context.job_id, name)])
        return f"{name}{ran[(context.job_id, name)]}"

    a = context.step("a", count, "a")
    context.sleep(60)
    b = context.step("b", count, "b")
    approval = context.wait_for("approved")
    return [a, b, approval]


def _completed() -> tuple[Job, Any]:
    registry = registry_of("durable.three", _three)
    job = Job.objects.enqueue("durable.three", {}, queue=QUEUE)
    run_once(job.id, registry)  # parks in the sleep
    expire(job.id)
    run_once(job.id, registry)  # parks in the wait
    Job.objects.signal(job.id, "approved", "yes")
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed" and run.result == ["a1", "b1", "yes"], run
    return job, registry


@pytest.mark.django_db
def test_restart__a_completed_job_forgets_the_step_and_those_after_it_and_runs_them_again() -> None:
    job, registry = _completed()

    done = restart_from_step(job.id, "sleep#1", by="ana")

    assert done.forgotten == ["sleep#1", "b", "wait:approved#1"] and done.state == "available"
    assert set(steps_of(job.id)) == {"a"}
    row = Job.objects.get(id=job.id)
    assert (row.state, row.finalized_at) == ("available", None)
    entry = row.errors[-1]
    assert entry["error"] == "restarted: from step 'sleep#1' by ana; forgot 3 step(s): sleep#1, b, wait:approved#1"
    assert entry["restarted_from"] == "sleep#1" and entry["attempt"] == 1
    # It runs again from the top: "a" keeps its result; the sleep, "b" and the wait run again.
    assert run_once(job.id, registry).state == "scheduled"  # type: ignore[union-attr]
    expire(job.id)
    assert run_once(job.id, registry).state == "waiting"  # type: ignore[union-attr]
    Job.objects.signal(job.id, "approved", "again")
    run = run_once(job.id, registry)
    assert run is not None and run.result == ["a1", "b2", "again"], run
    assert ran[(job.id, "a")] == 1 and ran[(job.id, "b")] == 2


@pytest.mark.django_db
def test_restart__a_parked_job_wakes_at_once_without_the_forgotten_wait() -> None:
    registry = registry_of("durable.three", _three)
    job = Job.objects.enqueue("durable.three", {}, queue=QUEUE)
    run_once(job.id, registry)
    expire(job.id)
    assert run_once(job.id, registry).state == "waiting"  # type: ignore[union-attr]

    done = restart_from_step(job.id, "b")

    assert done.forgotten == ["b", "wait:approved#1"] and state_of(job.id) == "available"
    entry = Job.objects.get(id=job.id).errors[-1]["error"]
    assert entry == "restarted: from step 'b'; forgot 2 step(s): b, wait:approved#1"
    assert run_once(job.id, registry).state == "waiting"  # type: ignore[union-attr]
    assert ran[(job.id, "b")] == 2


@pytest.mark.django_db
def test_restart__a_running_job_is_refused_and_nothing_changes() -> None:
    job, _ = _completed()
    Job.objects.filter(pk=job.pk).update(state="running")

    with pytest.raises(RestartError, match=rf"cannot restart job {job.id} from step 'a': it is running; cancel it"):
        restart_from_step(job.id, "a")

    assert len(steps_of(job.id)) == 4 and state_of(job.id) == "running"


@pytest.mark.django_db
def test_restart__an_unknown_step_names_the_steps_the_job_has() -> None:
    job, _ = _completed()
    with pytest.raises(RestartError, match=r"it has no step of that name \(its steps: 'a', 'sleep#1', 'b', "):
        restart_from_step(job.id, "c")
    with pytest.raises(RestartError, match=r"job 987654321 from step 'a': no such job exists") as caught:
        restart_from_step(987654321, "a")
    assert caught.value.state is None


@pytest.mark.django_db
def test_restart__a_workflow_step_with_upstreams_open_stays_waiting_for_them() -> None:
    job, _ = _completed()
    Job.objects.filter(pk=job.pk).update(state="waiting", pending=1, finalized_at=None)

    done = restart_from_step(job.id, "b")

    assert done.state == "waiting" and state_of(job.id) == "waiting"


@pytest.mark.django_db
def test_restart__joins_the_callers_transaction_and_rolls_back_with_it() -> None:
    job, _ = _completed()
    with pytest.raises(RuntimeError), transaction.atomic():
        restart_from_step(job.id, "a")
        assert steps_of(job.id) == {}
        raise RuntimeError("the caller gives up")
    assert len(steps_of(job.id)) == 4 and state_of(job.id) == "completed"


@pytest.mark.django_db(transaction=True)
def test_restart__locks_the_job_row_first(other_connection: psycopg.Connection[Any]) -> None:
    job, _ = _completed()
    with other_connection.transaction():  # another session holds the row, in whichever table it is
        held = other_connection.execute(statements["lock_jobs"], {"ids": [job.id], "states": ["completed"]})
        assert len(held.fetchall()) == 1
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '50ms'")
            restart_from_step(job.id, "a")
    assert JobStep.objects.filter(job_id=job.id).count() == 4  # the restart waited for the row, then gave up whole
