"""A workflow step's end hands its slot to the dependent it releases, in the same transaction.

The writer's batch releases a finished step's dependents before its hand-over claim runs, so when
the batch holds a workflow step the queue keeps the step's permit for a claim even if it had run
dry: a chain's next step (in the same queue) is claimed in the completing transaction, not after
the commit's NOTIFY and a claim of its own. Shown by what the database recorded (the next step's
``attempted_at`` is the completing transaction's ``now()``, its ``finalized_at``) and by the
writer's own count of permits handed over, in both capacity modes; a step whose dependent is in
another queue, or that releases nothing, gives its permit back.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from awa_django.models import Job, JobState
from awa_django.worker import QueueConfig
from awa_django.workflows import Workflow
from tests.harness import make_config, running_worker, wait_until
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

STEPS = 25


def _chain(queue_of: list[str]) -> list[int]:
    wf = Workflow("chain")
    previous = None
    for i, queue in enumerate(queue_of):
        previous = wf.add("wf.value", {"value": i}, queue=queue, after=[] if previous is None else [previous])
    wf.enqueue()
    return [s.id for s in wf.steps]


def _run(config_queues: dict[str, QueueConfig], ids: list[int], **overrides: object) -> int:
    config = make_config(config_queues, **overrides)
    with running_worker(config) as worker:
        wait_until(
            lambda: Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == len(ids),
            timeout=60,
            what="every step completed",
        )
        return worker.completer.handed_over


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["hard_reserved", "weighted"])
def test_chain__each_next_step_is_claimed_in_the_transaction_that_completes_the_one_before(mode: str) -> None:
    ids = _chain(["chain"] * STEPS)
    if mode == "weighted":  # the guaranteed slot is kept; overflow only while the queue is hungry
        handed_over = _run({"chain": QueueConfig("chain", min_workers=1, weight=1)}, ids, global_max_workers=4)
    else:
        handed_over = _run({"chain": QueueConfig("chain", max_workers=4)}, ids)
    rows = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    same_transaction = [rows[after].attempted_at == rows[before].finalized_at for before, after in pairwise(ids)]
    assert all(same_transaction), f"{same_transaction.count(False)} of {STEPS - 1} steps waited for their own claim"
    assert handed_over >= STEPS - 1
    assert [rows[i].result for i in ids] == list(range(STEPS))


@pytest.mark.django_db(transaction=True)
def test_chain__a_step_whose_dependent_is_in_another_queue_gives_its_permit_back() -> None:
    ids = _chain(["left", "right"] * 5)
    handed_over = _run({"left": QueueConfig("left", max_workers=2), "right": QueueConfig("right", max_workers=2)}, ids)
    rows = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    assert [rows[i].result for i in ids] == list(range(10))
    # Each next step is in the other queue: the hand-over claim (of the finished step's queue)
    # finds nothing, the permit goes back, and the released step is claimed after the commit.
    assert handed_over == 0
    ends_and_claims = [(rows[before].finalized_at, rows[after].attempted_at) for before, after in pairwise(ids)]
    assert all(end is not None and claim is not None and claim > end for end, claim in ends_and_claims)
