"""An atomic attempt whose handler sent nothing to the jobs' database has nothing to commit with its
completion: it leaves its transaction empty and hands the completion to the usual writer
(``settled`` None), as a plain attempt does. Anything sent (a read, a write, an enqueue) or an
``on_commit`` callback keeps the completion in the handler's transaction (``settled`` True).

Each example claims a real job on Django's connection (``inline.attempt.claim``) and runs
``run_atomic`` on it in autocommit, as a worker's thread does; what committed is read back from
the database, and the usual writer's part is ``write_outcome``, the one writer on a Django
connection (the worker's batch writer runs the same statements).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.context import ClaimedJob, JobContext, Outcome
from awa_django.inline.attempt import claim, write_outcome
from awa_django.models import Job
from awa_django.states import JobState
from awa_django.worker.atomic import run_atomic
from testproject.demo.models import Execution

KIND = "atomic_untouched"
# What a handler may do before it returns: "cursor" opens a cursor and sends nothing; "savepoint"
# is an inner atomic() (a SAVEPOINT, sent), "inner" one with savepoint=False (nothing sent).
ACTIONS = ("read", "write", "enqueue", "on_commit", "cursor", "savepoint", "inner")
SENDS = {"read", "write", "enqueue", "on_commit", "savepoint"}  # each keeps the completion in the transaction


def _completed_with(job: ClaimedJob, result: Any) -> Outcome:
    import json

    return Outcome(JobState.COMPLETED, result=json.dumps(result))


def _claimed() -> ClaimedJob:
    job_id = Job.objects.enqueue(KIND, {}, queue="atomic_untouched").id
    [claimed] = claim("default", now=Job.objects.get(pk=job_id).run_at, limit=1, ids=[job_id])
    return claimed


@pytest.mark.django_db(transaction=True)
@settings(max_examples=40, deadline=None)
@given(actions=st.lists(st.sampled_from(ACTIONS), max_size=3), returns=st.sampled_from([None, {"n": 1}]))
def test_property__settled_by_the_handlers_transaction_iff_it_sent_something(
    actions: list[str], returns: dict[str, int] | None
) -> None:
    job = _claimed()
    seen_at_commit: list[str] = []
    follow_ups: list[int] = []

    def handler() -> dict[str, int] | None:
        for action in actions:
            if action == "read":
                Job.objects.filter(pk=job.id).exists()
            elif action == "write":
                Execution.objects.create(job_id=job.id, attempt=job.attempt, run_lease=job.run_lease, pid=0)
            elif action == "enqueue":
                follow_ups.append(Job.objects.enqueue(KIND, {"after": job.id}, queue="atomic_untouched_next").id)
            elif action == "on_commit":
                # After the COMMIT: what another connection would read of the job then.
                transaction.on_commit(lambda: seen_at_commit.append(Job.objects.get(pk=job.id).state))
            elif action == "savepoint":
                with transaction.atomic():
                    pass
            elif action == "inner":
                with transaction.atomic(savepoint=False):
                    pass
            else:
                connection.cursor().close()
        return returns

    outcome = run_atomic("default", handler, JobContext(job), _completed_with)

    assert outcome.state is JobState.COMPLETED
    assert outcome.result == (None if returns is None else '{"n": 1}')
    if SENDS.intersection(actions):
        assert outcome.settled is True  # written in the handler's transaction, committed with it
    else:
        assert outcome.settled is None  # nothing to commit with it: the usual writer's
        assert Job.objects.get(pk=job.id).state == JobState.RUNNING  # nobody wrote it yet
        assert write_outcome("default", job, outcome, None) is True
    row = Job.objects.get(pk=job.id)
    assert (row.state, row.attempt) == (JobState.COMPLETED, 1)
    assert row.result == returns
    assert write_outcome("default", job, outcome, None) is False  # written once only
    assert Execution.objects.filter(job_id=job.id).count() == actions.count("write")
    assert Job.objects.filter(pk__in=follow_ups).count() == actions.count("enqueue")
    assert seen_at_commit == [JobState.COMPLETED] * actions.count("on_commit")


@pytest.mark.django_db(transaction=True)
def test_untouched__lease_lost_meanwhile__the_usual_writer_refuses_it() -> None:
    job = _claimed()

    def handler() -> None:
        # A rescue takes the job while its handler runs (its lease moves on).
        Job.objects.using("default").filter(pk=job.id).update(run_lease=job.run_lease + 1)

    # The handler's own update is a statement: settled in its transaction, refused by the guard.
    assert run_atomic("default", handler, JobContext(job), _completed_with).settled is False

    other = _claimed()
    Job.objects.filter(pk=other.id).update(run_lease=other.run_lease + 1)  # taken before it returns
    outcome = run_atomic("default", lambda: None, JobContext(other), _completed_with)
    assert outcome.settled is None
    assert write_outcome("default", other, outcome, None) is False  # refused: the attempt is lost
    assert Job.objects.get(pk=other.id).state == JobState.RUNNING


@pytest.mark.django_db
def test_untouched__inside_an_outer_transaction__written_in_it() -> None:
    """Inside a transaction already open (a test's, run_jobs within one) the block is a savepoint,
    sent at once: the completion is written in the transaction, as always."""
    job = _claimed()
    outcome = run_atomic("default", lambda: None, JobContext(job), _completed_with)
    assert outcome.settled is True
    assert Job.objects.get(pk=job.id).state == JobState.COMPLETED
