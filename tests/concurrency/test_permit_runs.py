"""``Permits``: a grant held as a count, a ``Permit`` made only for a position read, the rest given
back in bulk. ``Allocator.reserve`` must leave the allocator exactly as ``try_acquire`` and one
release per permit did (the reference), and its cost must not grow with the maxima."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.concurrency import Allocator, Permit, PermitKind, Permits, QueueLimits, held_before, release_all
from awa_django.concurrency import permits as permits_module
from tests.concurrency.linecount import lines_run

HUGE = (10**6, 2**31 - 1)


def _counted() -> tuple[Permits, list[tuple[str, int]]]:
    """Two local then three overflow permits, recording every give-back as (kind, count)."""
    given_back: list[tuple[str, int]] = []

    def one(kind: PermitKind) -> Callable[[], None]:
        return lambda: given_back.append((kind, 1))

    def many(counts: Mapping[PermitKind, int]) -> None:
        given_back.extend(counts.items())

    return Permits.granted("q", [("local", 2), ("overflow", 3)], one, many), given_back


def test_permits__slices_and_reads_make_only_what_is_read() -> None:
    permits, given_back = _counted()
    assert len(permits) == 5
    assert [p.kind for p in permits[1:3]] == ["local", "overflow"]
    assert permits[-1].kind == "overflow"
    assert permits[1] is permits[1:3][0]  # one Permit per position, however it is reached
    assert len(permits[4:2]) == 0
    with pytest.raises(IndexError, match="permit index 5 out of range for 5 permits"):
        permits[5]
    with pytest.raises(ValueError, match="take no step"):
        permits[::2]
    assert given_back == []


def test_permits__each_position_goes_back_exactly_once() -> None:
    permits, given_back = _counted()
    first = permits[0]
    assert first.release()
    assert release_all(permits[3:]) == 2  # unread: one bulk give-back
    assert release_all(permits[2:]) == 1  # 3 and 4 are gone already
    assert not permits[4].release()  # read after its bulk release: released, gives nothing back
    assert release_all(permits) == 1  # position 1 only
    assert release_all(permits) == 0
    assert sorted(given_back) == [("local", 1), ("local", 1), ("overflow", 1), ("overflow", 2)]


def test_permits__after_puts_held_permits_first_without_reading_the_grant() -> None:
    permits, given_back = _counted()
    held = [Permit("q", "local", lambda: given_back.append(("held", 1)))]
    joined = permits.after(held)
    assert len(joined) == 6
    assert joined[0] is held[0]
    assert list(held_before(joined[:4])) == held
    assert held_before(held) is held
    assert release_all(joined[1:]) == 5
    assert given_back == [("local", 2), ("overflow", 3)]
    assert release_all(joined) == 1


def test_permits__a_failing_give_back_still_releases_the_rest() -> None:
    def one(kind: PermitKind) -> Callable[[], None]:
        def fail() -> None:
            raise RuntimeError("hook")

        return fail

    given_back: list[Mapping[PermitKind, int]] = []
    permits = Permits.granted("q", [("hard", 4)], one, given_back.append)
    permits[0]
    with pytest.raises(RuntimeError, match="hook"):
        release_all(permits)
    assert given_back == [{"hard": 3}]
    assert release_all(permits) == 0


@st.composite
def allocators(draw: st.DrawFn) -> tuple[int | None, dict[str, QueueLimits]]:
    """A valid configuration of either mode, maxima from tiny to huge."""
    names = ["a", "b", "c"][: draw(st.integers(1, 3))]
    maximum = st.one_of(st.integers(1, 12), st.sampled_from(HUGE))
    if draw(st.booleans()):
        return None, {q: QueueLimits(max_workers=draw(maximum), weight=draw(st.integers(1, 4))) for q in names}
    queues = {q: QueueLimits(min_workers=draw(st.integers(0, 4)), weight=draw(st.integers(1, 4))) for q in names}
    floors = sum(q.min_workers for q in queues.values())
    return max(1, floors + draw(st.one_of(st.integers(0, 12), st.sampled_from(HUGE)))), queues


def _state(alloc: Allocator) -> tuple[object, ...]:
    """Everything an allocator shows, but the pool's credits (`_credits`)."""
    pool = alloc._pool
    per_queue = [
        (
            q,
            alloc.in_flight(q),
            alloc.demand(q),
            alloc.available(q),
            alloc.share(q),
            None if pool is None else (pool.held(q), pool.demand(q), pool.target(q)),
        )
        for q in alloc.queues
    ]
    return alloc.total_in_flight, alloc.free, alloc.waiting(), per_queue


def _credits(alloc: Allocator) -> list[float]:
    """The pool's ledger. One bulk release settles a queue's credit once where single releases
    settled it once each, at the same instant: equal but for float rounding in the sums."""
    pool = alloc._pool
    return [] if pool is None else [pool.credit(q) for q in alloc.queues]


@settings(max_examples=300, deadline=None)
@given(config=allocators(), data=st.data())
def test_reserve__leaves_the_allocator_as_try_acquire_and_single_releases_do(
    config: tuple[int | None, dict[str, QueueLimits]], data: st.DataObject
) -> None:
    """The reference takes a list of permits and releases them one by one, as the runner did; the
    new way reserves ``Permits``, reads the positions jobs fill and gives the rest back in bulk.
    After every step both allocators show the same state. (What is asked for stays small: the
    reference makes a Permit per slot; the maxima may be huge.)"""
    global_max, queues = config
    now = [0.0]
    reference = Allocator(global_max, queues, clock=lambda: now[0])
    new = Allocator(global_max, queues, clock=lambda: now[0])
    calls: dict[str, list[str]] = {"reference": [], "new": []}
    reference.on_release = calls["reference"].append
    new.on_release = calls["new"].append
    grants: list[tuple[list[Permit], Permits]] = []
    names = sorted(queues)
    for _ in range(data.draw(st.integers(1, 25))):
        step = data.draw(st.sampled_from(["acquire", "fill", "release", "one", "clear", "tick"]))
        if step == "acquire":
            queue, wanted = data.draw(st.sampled_from(names)), data.draw(st.integers(0, 30))
            old, lazy = reference.try_acquire(queue, wanted), new.reserve(queue, wanted)
            assert len(old) == len(lazy)
            grants.append((old, lazy))
        elif step == "fill" and grants:  # a claim filled its first k permits, the rest go back
            old, lazy = data.draw(st.sampled_from(grants))
            k = data.draw(st.integers(0, len(old)))
            assert [p.kind for p in old[:k]] == [p.kind for p in lazy[:k]]
            assert release_all(old[k:]) == release_all(lazy[k:])
        elif step == "release" and grants:
            old, lazy = data.draw(st.sampled_from(grants))
            start = data.draw(st.integers(0, len(old)))
            stop = data.draw(st.integers(start, len(old)))
            assert release_all(old[start:stop]) == release_all(lazy[start:stop])
        elif step == "one" and grants:
            old, lazy = data.draw(st.sampled_from(grants))
            if old:
                index = data.draw(st.integers(0, len(old) - 1))
                assert old[index].release() == lazy[index].release()
        elif step == "clear":
            queue = data.draw(st.sampled_from(names))
            reference.clear_demand(queue)
            new.clear_demand(queue)
        else:
            now[0] += data.draw(st.sampled_from([0.0, 0.001, 0.5, 3.0]))
        assert _state(new) == _state(reference)
        assert _credits(new) == pytest.approx(_credits(reference), abs=1e-9)
        # One wake per bulk release instead of one per permit: the same queues, each told.
        assert set(calls["new"]) == set(calls["reference"])
    for old, lazy in grants:
        assert release_all(old) == release_all(lazy)
    assert _state(new) == _state(reference)
    assert new.total_in_flight == 0


@pytest.mark.parametrize("global_max", [*HUGE, 100])
def test_reserve__the_whole_of_a_huge_maximum_is_granted_and_given_back(global_max: int) -> None:
    alloc = Allocator.weighted(global_max, {"a": QueueLimits(min_workers=1), "b": QueueLimits(weight=3)})
    permits = alloc.reserve("a", global_max)
    assert len(permits) == global_max
    assert (permits[0].kind, permits[1].kind, permits[-1].kind) == ("local", "overflow", "overflow")
    assert alloc.in_flight("a") == alloc.total_in_flight == global_max
    permits[0].release()
    assert release_all(permits[2:]) == global_max - 2
    assert alloc.in_flight("a") == 1
    assert release_all(permits) == 1
    assert alloc.total_in_flight == 0


def _lines_run(global_max: int) -> int:
    """Lines of the concurrency package run by one claim's use of the allocator: reserve as much
    as the global maximum allows, fill three permits, give back the rest, release the three.
    An operation count, the same on every machine (a time would not be)."""
    alloc = Allocator.weighted(global_max, {"a": QueueLimits(min_workers=1), "b": QueueLimits(weight=3)})

    def claim() -> None:
        permits = alloc.reserve("a", global_max)
        jobs = [permits[i] for i in range(3)]
        release_all(permits[3:])
        release_all(jobs)

    count = lines_run(permits_module.__file__.rsplit("/", 1)[0], claim)
    assert alloc.total_in_flight == 0
    return count


def test_reserve__a_claim_costs_the_same_whatever_the_global_maximum() -> None:
    assert _lines_run(10**6) == _lines_run(100)
