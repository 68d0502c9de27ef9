"""The writer's hand-over across queues (weighted mode): the slots of finished jobs that no queue of
theirs keeps go to the queues a release would wake, claimed in the write's round trip.

With 1,000 one-job queues sharing 50 weighted slots, each freed slot used to wait for the write's
commit, its release, the woken runner's poll and that runner's own claim. Now ``Runners.plan_hand_over``
lends the spare slots (``Allocator.lending``) to the runners ``Allocator.to_wake`` names, each
taking what its own next claim would. Until the writes that end the finished jobs commit, their
queues keep counting them (their rows still run), and what none takes keeps its count against the
global maximum.

These tests drive ``Runners.plan_hand_over`` directly, with a real allocator and no database (as
test_hand_over_top_up.py does): which permits the plan holds, and that the global maximum holds
while the finished jobs' rows are still being written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.concurrency import Allocator, Permit
from awa_django.worker import QueueConfig
from awa_django.worker.runner import QueueRunner, Runners
from tests.worker.test_hand_over_top_up import _runners


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _ran_dry(runner: QueueRunner) -> None:
    """As the queue's claim that left no due job leaves it."""
    backlog = runner.backlog
    assert backlog.looked_dry(backlog.generation, own=True)


def _hungry(runners: Runners, allocator: Allocator, queue: str, wanted: int) -> list[Permit]:
    """The queue's runner knows of backlog and asked for permits, as its poll does."""
    runners[queue].nudge()
    return allocator.try_acquire(queue, wanted)


def _weighted(names: list[str], global_max: int) -> tuple[Allocator, dict[str, QueueConfig]]:
    queues = {name: QueueConfig(name, weight=1) for name in names}
    return Allocator.weighted(global_max, queues, clock=lambda: 100.0), queues


def test_across__a_dry_queues_freed_slots_go_to_the_waiting_queues_in_the_same_round_trip(
    loop: asyncio.AbstractEventLoop,
) -> None:
    allocator, queues = _weighted(["done", "b", "c"], 2)
    runners = _runners(loop, allocator, queues, global_max_workers=2)
    finished = _hungry(runners, allocator, "done", 2)
    allocator.clear_demand("done")  # its claim said no job was left: it stood down
    _ran_dry(runners["done"])
    assert len(finished) == 2
    assert _hungry(runners, allocator, "b", 2) == [] and _hungry(runners, allocator, "c", 2) == []

    plan = runners.plan_hand_over(finished, frozenset())

    assert sorted(plan) == ["b", "c"]
    assert [len(plan[q].permits) for q in ("b", "c")] == [1, 1]
    assert plan["b"].params["limit"] == plan["c"].params["limit"] == 1
    assert all(runners[q].claiming for q in ("b", "c"))  # the claim is theirs until it answers
    # The finished jobs' slots went to b and c: two in flight on the host while the rows are
    # written, and "done" still counts its two, whose rows still run until the write commits.
    assert allocator.total_in_flight == 2 and allocator.free == 0
    assert allocator.in_flight("done") == 2 and allocator.in_flight("b") == allocator.in_flight("c") == 1
    # After the write, the writer releases what it did not pass: "done" stops counting them, and
    # nothing is freed (the slots are b's and c's), so nobody is woken for them.
    released: list[str] = []
    allocator.on_release = released.append
    assert [p.release() for p in finished] == [True, True]
    assert allocator.total_in_flight == 2 and allocator.in_flight("done") == 0 and released == []
    runners.adopt("b", [], plan["b"], claim_ran=True)  # b found nothing: its permit goes back
    assert allocator.total_in_flight == 1 and allocator.in_flight("c") == 1 and released == ["b"]


def test_across__slots_no_queue_takes_keep_their_count_until_the_write_then_go_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    allocator, queues = _weighted(["done", "idle"], 3)
    runners = _runners(loop, allocator, queues, global_max_workers=3)
    released: list[str] = []
    allocator.on_release = released.append
    finished = _hungry(runners, allocator, "done", 3)
    allocator.clear_demand("done")
    _ran_dry(runners["done"])

    assert runners.plan_hand_over(finished, frozenset()) == {}

    # Lent and not taken: the queue and the host keep counting them while the rows are written.
    assert allocator.in_flight("done") == 3 and allocator.total_in_flight == 3 and allocator.free == 0
    assert all(p.lent and not p.released for p in finished)
    assert [p.release() for p in finished] == [True] * 3
    assert allocator.total_in_flight == 0 and allocator.in_flight("done") == 0 and released == ["done"] * 3


def test_across__hard_reserved_mode_passes_nothing_across(loop: asyncio.AbstractEventLoop) -> None:
    allocator = Allocator.hard_reserved({"done": 2, "b": 2}, clock=lambda: 100.0)
    runners = _runners(
        loop, allocator, {"done": QueueConfig("done", max_workers=2), "b": QueueConfig("b", max_workers=2)}
    )
    finished = _hungry(runners, allocator, "done", 2)
    allocator.clear_demand("done")
    _ran_dry(runners["done"])  # as its dry claim left it
    assert runners.plan_hand_over(finished, frozenset()) == {}
    assert not any(p.lent or p.released for p in finished)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_across__over_random_pools_never_passes_the_global_maximum_and_leaves_no_slot_a_waiting_queue_could_use(
    data: st.DataObject,
) -> None:
    """Random floors, weights and holdings; some queues hungry (refused, their demand recorded),
    some finished jobs of queues that may or may not keep their slots. The plan never brings the
    host past its global maximum, passes slots only to hungry queues, and leaves no slot free while
    a hungry queue outside the plan is one ``to_wake`` would name; once the writer releases what it
    did not pass, the count is exactly the permits still held."""
    names = [f"q{i}" for i in range(data.draw(st.integers(2, 5), label="queues"))]
    global_max = data.draw(st.integers(len(names), 12), label="global_max_workers")
    mins = data.draw(st.lists(st.integers(0, 2), min_size=len(names), max_size=len(names)), label="mins")
    if sum(mins) > global_max:
        mins = [0] * len(names)
    weights = data.draw(st.lists(st.integers(1, 4), min_size=len(names), max_size=len(names)), label="weights")
    queues = {n: QueueConfig(n, min_workers=m, weight=w) for n, m, w in zip(names, mins, weights, strict=True)}
    allocator = Allocator.weighted(global_max, queues, clock=lambda: 100.0)
    loop = asyncio.new_event_loop()
    try:
        runners = _runners(loop, allocator, queues, global_max_workers=global_max)
        held: list[Any] = []
        for queue in data.draw(st.lists(st.sampled_from(names), max_size=8), label="acquiring"):
            held += _hungry(runners, allocator, queue, data.draw(st.integers(1, global_max), label="wanted"))
        for queue in data.draw(st.lists(st.sampled_from(names), unique=True), label="dry"):
            allocator.clear_demand(queue)
            _ran_dry(runners[queue])  # its claim said no job was left
        for queue in data.draw(st.lists(st.sampled_from(names), unique=True), label="polling"):
            if runners[queue].hungry:  # its poll: what it is granted runs, what it is refused is its demand
                held += allocator.try_acquire(queue, global_max)
        finished = data.draw(st.lists(st.sampled_from(held), unique_by=id), label="finished") if held else []
        still = [p for p in held if all(p is not f for f in finished)]
        hungry_before = {n for n in names if runners[n].hungry}

        plan = runners.plan_hand_over(finished, frozenset())

        assert allocator.total_in_flight <= global_max
        passing = [p for claim in plan.values() for p in claim.permits]
        # Every queue still counts each of its permits not released (their rows still run).
        for queue in names:
            mine = {id(p) for p in [*held, *passing] if p.queue == queue and not p.released}
            assert allocator.in_flight(queue) == len(mine), queue
        finished_queues = {p.queue for p in finished}
        for queue in plan:
            assert queue in hungry_before or queue in finished_queues
        # The writer, after the write: what it did not pass goes back. None of it is a slot a
        # hungry queue outside the plan could have taken in the write's round trip.
        ids = {id(p) for p in passing}
        for permit in finished:
            if id(permit) not in ids:
                permit.release()
        waiting = [q for q in allocator.to_wake() if q not in plan and runners[q].hungry]
        assert allocator.free == 0 or not waiting, (allocator.free, waiting)
        outstanding = [p for p in [*still, *(p for claim in plan.values() for p in claim.permits)] if not p.released]
        assert allocator.total_in_flight == len({id(p) for p in outstanding})
    finally:
        loop.close()
