"""The incremental OverflowPool decides exactly as the plain computation of its rule does.

`ReferencePool` (tests/concurrency/reference_pool.py) re-plans, settles and ranks every contender
on every call. Both pools get the same random histories of demand, grants, releases, cleared
demand, cluster observations, settings changes and clock steps, and must grant the same, name
the same waiting queues in the same order, give the same targets and shares, and agree on every
credit to within the ranking's tie.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from awa_django.concurrency import OverflowPool
from awa_django.concurrency.pool import _CREDIT_TIE
from tests.concurrency.reference_pool import ReferencePool

QUEUES = ("a", "b", "c", "d", "e", "f")
weights_strategy = st.dictionaries(st.sampled_from(QUEUES), st.integers(1, 4), max_size=len(QUEUES))
# Whole milliseconds: credits then differ either exactly (a tie) or by far more than the tie
# tolerance, so the two float paths cannot round a near-tie differently.
step_strategy = st.integers(0, 2500).map(lambda ms: ms / 1000)


class PoolAgainstReference(RuleBasedStateMachine):
    @initialize(total=st.integers(0, 12), weights=weights_strategy, start=st.integers(0, 10**6))
    def start(self, total: int, weights: dict[str, int], start: int) -> None:
        self.now = float(start)
        self.pool = OverflowPool(total, weights, now=self.now)
        self.reference = ReferencePool(total, weights, now=self.now)
        self.weights = dict(weights)

    def _known(self, queue: str) -> bool:
        return queue in self.weights

    @rule(step=step_strategy)
    def time_passes(self, step: float) -> None:
        self.now += step

    @rule(queue=st.sampled_from(QUEUES), wanted=st.integers(0, 15))
    def acquire(self, queue: str, wanted: int) -> None:
        if not self._known(queue):
            return
        got = self.pool.try_acquire(queue, wanted, now=self.now)
        assert got == self.reference.try_acquire(queue, wanted, now=self.now)

    @rule(queue=st.sampled_from(QUEUES), data=st.data())
    def release(self, queue: str, data: st.DataObject) -> None:
        try:
            held = self.reference.held(queue)
        except KeyError:
            return
        if held == 0:
            return
        n = data.draw(st.integers(1, held))
        self.pool.release(queue, n, now=self.now)
        self.reference.release(queue, n, now=self.now)

    @rule(queue=st.sampled_from(QUEUES), returning=st.integers(0, 4))
    def keepable(self, queue: str, returning: int) -> None:
        if not self._known(queue) or returning > self.reference.held(queue):
            return
        kept = self.pool.keepable(queue, returning, now=self.now)
        assert kept == self.reference.keepable(queue, returning, now=self.now)

    @rule(queue=st.sampled_from(QUEUES))
    def grantable(self, queue: str) -> None:
        if self._known(queue):
            assert self.pool.grantable(queue, now=self.now) == self.reference.grantable(queue, now=self.now)

    @precondition(lambda self: bool(self.weights))
    @rule(data=st.data())
    def observe(self, data: st.DataObject) -> None:
        names = data.draw(st.lists(st.sampled_from(sorted(self.weights)), unique=True, max_size=3))
        uses = {q: (data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))) for q in names}
        self.pool.observe(uses, now=self.now)
        self.reference.observe(uses, now=self.now)

    @rule(total=st.integers(0, 12), weights=weights_strategy)
    def reconfigure(self, total: int, weights: dict[str, int]) -> None:
        self.pool.reconfigure(total, weights, now=self.now)
        self.reference.reconfigure(total, weights, now=self.now)
        self.weights = dict(weights)

    @invariant()
    def same_decisions(self) -> None:
        pool, reference = self.pool, self.reference
        assert pool.waiting(now=self.now) == reference.waiting(now=self.now)
        assert pool.contenders == reference.contenders
        assert pool.held_total == reference.held_total
        for queue in self.weights:
            assert pool.held(queue) == reference.held(queue)
            assert pool.demand(queue) == reference.demand(queue)
            assert pool.target(queue, now=self.now) == reference.target(queue, now=self.now)
            assert pool.share(queue) == pytest.approx(reference.share(queue), abs=1e-9)
            expected = reference.credit(queue, now=self.now)
            assert pool.credit(queue, now=self.now) == pytest.approx(expected, abs=_CREDIT_TIE / 10)


TestPoolAgainstReference = PoolAgainstReference.TestCase
TestPoolAgainstReference.settings = settings(
    max_examples=200, stateful_step_count=50, report_multiple_bugs=False, deadline=None
)


def test_many_queues_joining_at_once__same_grants_as_the_reference() -> None:
    """The shape of 1,000 one-job queues, smaller: many equal queues join at one instant (one
    standing, a tie as large as the group), take the free slots one each and stand down."""
    names = [f"q{i:03d}" for i in range(120)]
    pool = OverflowPool(7, dict.fromkeys(names, 1), now=0.0)
    reference = ReferencePool(7, dict.fromkeys(names, 1), now=0.0)
    now, left = 0.0, list(names)
    running: list[str] = []
    while left or running:
        now += 0.001
        for queue in left[:]:
            got = pool.try_acquire(queue, 7, now=now)
            assert got == reference.try_acquire(queue, 7, now=now)
            if got:
                left.remove(queue)
                running.append(queue)
                for impl in (pool, reference):
                    impl.release(queue, got - 1, now=now)
                    impl.try_acquire(queue, 0, now=now)
        for queue in running[:3]:
            pool.release(queue, 1, now=now)
            reference.release(queue, 1, now=now)
        del running[:3]
        assert pool.waiting(now=now) == reference.waiting(now=now)
