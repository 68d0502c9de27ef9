"""The writer's hand-over claim asks for every slot its queue may take now, not only the freed ones.

A fan-out's head ends in a batch of one: its release makes thousands of steps available in the
write's transaction, and the hand-over claim that follows it in the same round trip used to carry
the head's one permit, while the runner claimed the other slots after the commit's NOTIFY. The two
groups then kept apart for the whole drain, each with its own writes and claims (batches of 49 and
1 where one of 50 would do: bench/workflows.py read the fan-out's drain at 0.64x the plain one).
Now the plan tops the kept permits up with what ``Allocator.try_acquire`` grants the queue, the
permits the runner's own next claim would take, so one claim fills every slot.

These tests drive ``Runners.plan_hand_over`` directly, with a real allocator and no database: what
they check is which permits the plan holds, and that the allocator's rules (capacity, weights,
rate tokens) bound the top-up exactly as they bound the runner's own claim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from awa_django.concurrency import Allocator, Permit
from awa_django.concurrency.keyconfig import QueueKeySettings
from awa_django.worker import QueueConfig
from awa_django.worker.keyed import KeyedPermit
from awa_django.worker.runner import Runners
from awa_django.worker.stop import Stop
from tests.harness import make_config


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop for the runners' stand-in tasks (their loops are never run: planning alone is tested)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _runners(
    loop: asyncio.AbstractEventLoop, allocator: Allocator, queues: dict[str, QueueConfig], **overrides: Any
) -> Runners:
    config = make_config(queues, **overrides)
    spawned = []

    def spawn(name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        coro.close()  # the runner's loop is not run: only its planning is under test
        task = loop.create_task(asyncio.sleep(0))
        spawned.append(task)
        return task

    attempts = SimpleNamespace(start=lambda job, permit, deadline: None)  # no job is run here
    runners = Runners(
        config,
        allocator,
        pool=None,  # type: ignore[arg-type]  # no claim runs here
        stop=Stop(),
        attempts=attempts,  # type: ignore[arg-type]
        spawn=spawn,
        worker="test:1",
    )
    for queue in queues.values():
        runners.serve(queue)
    loop.run_until_complete(asyncio.gather(*spawned))
    return runners


def test_top_up__a_releasing_batch_of_one_claims_for_every_free_slot_of_its_queue(
    loop: asyncio.AbstractEventLoop,
) -> None:
    allocator = Allocator.hard_reserved({"fan": 8})
    runners = _runners(loop, allocator, {"fan": QueueConfig("fan", max_workers=8)})
    head = allocator.try_acquire("fan", 1)
    plan = runners.plan_hand_over(head, frozenset({"fan"}))
    claim = plan["fan"]
    assert len(claim.permits) == 8
    assert claim.params["limit"] == 8
    assert head[0] in claim.permits  # the freed permit passes on; the other seven are new
    assert allocator.in_flight("fan") == 8 and allocator.available("fan") == 0


def test_top_up__a_batch_that_releases_nothing_plans_no_claim_for_an_idle_queue(
    loop: asyncio.AbstractEventLoop,
) -> None:
    allocator = Allocator.hard_reserved({"plain": 8})
    runners = _runners(loop, allocator, {"plain": QueueConfig("plain", max_workers=8)})
    permits = allocator.try_acquire("plain", 1)
    assert runners.plan_hand_over(permits, frozenset()) == {}
    assert allocator.in_flight("plain") == 1  # nothing taken: the freed permit goes back after the write


@pytest.mark.parametrize("claim_ran", [True, False], ids=["unfilled", "refused"])
def test_top_up__an_unfilled_or_refused_claim_gives_every_permit_back(
    loop: asyncio.AbstractEventLoop, claim_ran: bool
) -> None:
    allocator = Allocator.hard_reserved({"fan": 8})
    runners = _runners(loop, allocator, {"fan": QueueConfig("fan", max_workers=8)})
    head = allocator.try_acquire("fan", 1)
    claim = runners.plan_hand_over(head, frozenset({"fan"}))["fan"]
    # claim_ran True: the release made nothing available here; False: the batch was refused
    runners.adopt("fan", [], claim, claim_ran=claim_ran)
    assert allocator.in_flight("fan") == 0
    assert all(permit.released for permit in claim.permits)


def test_top_up__weighted__takes_the_overflow_the_runner_would_and_leaves_another_queues_floor(
    loop: asyncio.AbstractEventLoop,
) -> None:
    allocator = Allocator.weighted(
        10, {"fan": QueueConfig("fan", min_workers=1, weight=1), "other": QueueConfig("other", min_workers=3, weight=1)}
    )
    runners = _runners(
        loop,
        allocator,
        {"fan": QueueConfig("fan", min_workers=1, weight=1), "other": QueueConfig("other", min_workers=3, weight=1)},
        global_max_workers=10,
    )
    head = allocator.try_acquire("fan", 1)
    claim = runners.plan_hand_over(head, frozenset({"fan"}))["fan"]
    # The idle queue's 3 guaranteed slots stay free for it: the fan-out gets its floor and the overflow.
    assert len(claim.permits) == 7
    assert allocator.total_in_flight == 7
    assert allocator.try_acquire("other", 3) and allocator.in_flight("other") == 3


def test_top_up__weighted__takes_exactly_what_the_runners_own_claim_would(loop: asyncio.AbstractEventLoop) -> None:
    queues = {"fan": QueueConfig("fan", min_workers=1, weight=1), "busy": QueueConfig("busy", min_workers=1, weight=1)}
    allocator = Allocator.weighted(10, queues)
    runners = _runners(loop, allocator, queues, global_max_workers=10)
    busy = allocator.try_acquire("busy", 5)  # its floor and 4 of the overflow
    head = allocator.try_acquire("fan", 1)
    twin = Allocator.weighted(10, queues)  # the same state, where the runner asks for itself
    twin_busy = twin.try_acquire("busy", 5)
    twin_head = twin.try_acquire("fan", 1)
    claim = runners.plan_hand_over(head, frozenset({"fan"})).get("fan")
    planned = 0 if claim is None else len(claim.permits)
    runner_would = len(twin_head) + len(twin.try_acquire("fan", 10))
    assert len(twin_busy) == len(busy)
    assert planned == runner_would == 5  # the free overflow, no more than its own claim would take
    assert allocator.total_in_flight == 10 and allocator.in_flight("busy") == 5


def test_top_up__rate_tokens_bound_the_extra_permits(loop: asyncio.AbstractEventLoop) -> None:
    allocator = Allocator.hard_reserved({"fan": 8})
    queue = QueueConfig("fan", max_workers=8, rate_limit=1.0, rate_burst=3)
    runners = _runners(loop, allocator, {"fan": queue})
    head = allocator.try_acquire("fan", 1)
    claim = runners.plan_hand_over(head, frozenset({"fan"}))["fan"]
    assert len(claim.permits) == 3  # a burst of 3 tokens: the freed permit and two more
    assert allocator.in_flight("fan") == 3


def test_top_up__a_paused_queue_plans_nothing(loop: asyncio.AbstractEventLoop) -> None:
    allocator = Allocator.hard_reserved({"fan": 8})
    runners = _runners(loop, allocator, {"fan": QueueConfig("fan", max_workers=8, paused=True)})
    head = allocator.try_acquire("fan", 1)
    assert runners.plan_hand_over(head, frozenset({"fan"})) == {}
    assert allocator.in_flight("fan") == 1


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_top_up__over_random_allocators_plans_what_the_runner_would_and_never_passes_capacity(
    data: st.DataObject,
) -> None:
    """Any mode, floors, weights, maxima and permits already held: the hand-over of one freed permit
    of a hungry queue holds exactly the kept permit(s) plus what the runner's own ``try_acquire``
    would be granted in the same state (replayed on a twin allocator), and no queue or host ever
    holds more than its capacity."""
    weighted = data.draw(st.booleans(), label="weighted")
    names = [f"q{i}" for i in range(data.draw(st.integers(1, 3), label="queues"))]
    if weighted:
        global_max = data.draw(st.integers(len(names), 16), label="global_max_workers")
        mins = data.draw(st.lists(st.integers(0, 3), min_size=len(names), max_size=len(names)), label="mins")
        mins = [m if sum(mins) <= global_max else 0 for m in mins]
        weights = data.draw(st.lists(st.integers(1, 5), min_size=len(names), max_size=len(names)), label="weights")
        queues = {n: QueueConfig(n, min_workers=m, weight=w) for n, m, w in zip(names, mins, weights, strict=True)}

        def make() -> Allocator:
            return Allocator.weighted(global_max, queues, clock=lambda: 100.0)

        overrides: dict[str, Any] = {"global_max_workers": global_max}
    else:
        maxima = data.draw(st.lists(st.integers(1, 8), min_size=len(names), max_size=len(names)), label="maxima")
        queues = {n: QueueConfig(n, max_workers=m) for n, m in zip(names, maxima, strict=True)}

        def make() -> Allocator:
            return Allocator.hard_reserved({n: q.max_workers for n, q in queues.items()}, clock=lambda: 100.0)

        overrides = {}
    held = data.draw(st.lists(st.tuples(st.sampled_from(names), st.integers(1, 10)), max_size=6), label="held")
    allocator, twin = make(), make()
    mine: list[Any] = allocator.try_acquire("q0", 1)
    theirs: list[Any] = twin.try_acquire("q0", 1)
    for queue, wanted in held:
        got, twin_got = allocator.try_acquire(queue, wanted), twin.try_acquire(queue, wanted)
        assert len(got) == len(twin_got)
        if queue == "q0":
            mine, theirs = mine + got, theirs + twin_got
    assume(mine)
    loop = asyncio.new_event_loop()
    try:
        runners = _runners(loop, allocator, queues, **overrides)
        runners["q0"].nudge()  # hungry: its last claim found more
        plan = runners.plan_hand_over(mine[:1], frozenset())
        kept = twin.keepable("q0", theirs[:1])
        expected = 0 if not kept else len(kept) + len(twin.try_acquire("q0", runners["q0"].wanted))
        planned = len(plan["q0"].permits) if "q0" in plan else 0
        assert planned == expected
        if weighted:
            assert allocator.total_in_flight <= global_max
        else:
            assert all(allocator.in_flight(n) <= q.max_workers for n, q in queues.items())
    finally:
        loop.close()


def _keyed_runner(
    loop: asyncio.AbstractEventLoop, allocator: Allocator, backlog: dict[str, int]
) -> tuple[Runners, list[Permit]]:
    """A queue "ten" of 8 slots sharing them by key (key "heavy" has weight 2), its keys' backlog
    known, arrivals read, and one attempt running on a permit the writer now frees."""
    runners = _runners(loop, allocator, {"ten": QueueConfig("ten", max_workers=8)})
    runner = runners["ten"]
    runner.apply_keys(QueueKeySettings(overrides={"heavy": (2, None)}))
    keyed = runner.keyed
    assert keyed is not None
    keyed.arrivals_pending = False
    keyed.shares.offer("a", 1)
    (key,) = keyed.shares.pick(1)
    (inner,) = allocator.try_acquire("ten", 1)
    freed: list[Permit] = [KeyedPermit(inner, keyed, key, time.monotonic(), lambda: None)]
    for name, n in backlog.items():
        keyed.shares.offer(name, n)
    return runners, freed


def test_top_up__keyed__the_hand_over_claims_every_free_slot_by_key(loop: asyncio.AbstractEventLoop) -> None:
    """A keyed queue's hand-over used to claim only for its freed permits, so slots that once
    started apart kept their own writes and claims (a 10,000-key drain's claims of 47 and 3)."""
    allocator = Allocator.hard_reserved({"ten": 8})
    runners, freed = _keyed_runner(loop, allocator, {"a": 100, "heavy": 100})
    claim = runners.plan_hand_over(freed, frozenset())["ten"]
    assert claim.statement == "claim_keyed_jobs"
    assert len(claim.permits) == 8 and freed[0] in claim.permits
    grants = claim.params["awarded"]
    assert sum(grants.values()) == 8 and grants["heavy"] > grants["a"] >= 1  # shared by weight, 2 : 1
    assert allocator.in_flight("ten") == 8


@pytest.mark.parametrize(("backlog", "held"), [({"a": 2}, 2), ({}, 1)], ids=["short-backlog", "no-backlog"])
def test_top_up__keyed__permits_no_key_was_granted_go_back_at_once(
    loop: asyncio.AbstractEventLoop, backlog: dict[str, int], held: int
) -> None:
    """Grants stop at the keys' known backlog: the top-up's permits past them are released by the
    plan itself (the freed permit not used goes back through the writer, still held here)."""
    allocator = Allocator.hard_reserved({"ten": 8})
    runners, freed = _keyed_runner(loop, allocator, backlog)
    claim = runners.plan_hand_over(freed, frozenset()).get("ten")
    assert (0 if claim is None else len(claim.permits)) == sum(backlog.values())
    assert allocator.in_flight("ten") == held
