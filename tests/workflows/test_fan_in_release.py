"""A fan-in's release, batch by batch, against a count kept in Python: ``awa_release_jobs`` lowers
the dependent's ``pending`` by exactly the edges each batch ended, whichever of its two paths runs
(a batch of completed jobs whose dependent still waits takes the short one: one update by key; a
batch with a failed or cancelled upstream, or the one that ends the wait, the planned release),
and changes the dependent's state once, at the batch that ends its wait.

The batches are the completer's contract (rows the caller just ended, each once), written here
straight to the rows and handed to the function, as complete_jobs and finalize_jobs do."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.models import Job, JobState
from awa_django.workflows import Workflow, always
from tests.conftest import connect_outside_django
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

ENDS = st.sampled_from([JobState.COMPLETED] * 3 + [JobState.FAILED, JobState.CANCELLED])  # mostly completed


def end(ids: list[int], states: list[str]) -> None:
    """End the jobs ``ids`` in ``states`` and release them, in one transaction (as a completer's write)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job AS j SET state = d.state, finalized_at = now()"
            " FROM unnest(%s::bigint[], %s::text[]) AS d(id, state) WHERE j.id = d.id",
            [ids, states],
        )
        cursor.execute("SELECT awa_release_jobs(%s::bigint[], %s::text[])", [ids, states])


@pytest.mark.django_db(transaction=True)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    width=st.integers(1, 40),
    cuts=st.lists(st.integers(1, 12), min_size=1, max_size=40),
    ends=st.lists(ENDS, min_size=40, max_size=40),
    finally_step=st.booleans(),
)
def test_fan_in__each_batch_lowers_the_count_by_its_edges__the_state_changes_once(
    width: int, cuts: list[int], ends: list[str], finally_step: bool
) -> None:
    Job.objects.all().delete()
    wf = Workflow("fan-in")
    parts = [wf.add("wf.value", {"value": i}, name="part") for i in range(width)]
    tail = wf.add("wf.sum", name="tail", after=[always(p) for p in parts] if finally_step else parts)
    wf.enqueue()
    ids = [p.id for p in parts]
    pending, doomed, position = width, False, 0
    for cut in [*cuts, width]:  # the last cut takes whatever is left
        batch = ids[position : position + cut]
        if not batch:
            break
        states = [ends[i] for i in range(position, position + len(batch))]
        position += len(batch)
        before = Job.objects.values_list("state", "pending").get(pk=tail.id)
        end(batch, states)
        state, left = Job.objects.values_list("state", "pending").get(pk=tail.id)
        if before[0] != JobState.WAITING:
            assert (state, left) == before  # a cancelled dependent is left alone
            continue
        pending -= len(batch)
        doomed = doomed or (not finally_step and any(s != JobState.COMPLETED for s in states))
        if doomed:
            assert state == JobState.CANCELLED, (batch, states)
        elif pending > 0:
            assert (state, left) == (JobState.WAITING, pending)
        else:
            assert (state, left) == (JobState.AVAILABLE, 0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("later", [False, True])
def test_the_batch_that_ends_a_wait__releases_by_key_and_wakes_the_dependent_s_queue(later: bool) -> None:
    """A chain's step (one completed job, one dependent reaching 0: the release by key of 0019):
    the dependent becomes available now and its queue is NOTIFYed, or, with its own run_at ahead,
    scheduled at that run_at and no queue is woken."""
    from datetime import timedelta

    from django.utils import timezone

    run_at = timezone.now() + timedelta(hours=1) if later else None
    wf = Workflow("chain")
    first = wf.add("wf.value", {"value": 1}, name="first", queue="here")
    second = wf.add("wf.value", {"value": 2}, name="second", queue="elsewhere", run_at=run_at, after=[first])
    wf.enqueue()
    listener = connect_outside_django()
    try:
        listener.execute("LISTEN awa_jobs")
        end([first.id], [JobState.COMPLETED])
        # A round trip after the commit: the server sends what the commit notified before it answers.
        listener.execute("SELECT 1")
        woken = [n.payload for n in listener.notifies(timeout=0.2 if later else 5, stop_after=None if later else 1)]
    finally:
        listener.close()
    row = Job.objects.get(pk=second.id)
    assert row.pending == 0
    if later:
        assert (row.state, row.run_at) == (JobState.SCHEDULED, run_at)
        assert "elsewhere" not in woken
    else:
        assert row.state == JobState.AVAILABLE
        assert woken == ["elsewhere"]
