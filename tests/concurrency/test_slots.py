from collections.abc import Callable

import pytest

from awa_django.concurrency import Slots


@pytest.mark.parametrize(
    ("capacity", "held_before", "wanted", "granted"),
    [
        pytest.param(5, 0, 3, 3, id="under_capacity_gets_all_wanted"),
        pytest.param(5, 0, 9, 5, id="over_capacity_gets_what_is_left"),
        pytest.param(5, 4, 3, 1, id="partly_used_gets_remainder"),
        pytest.param(5, 5, 1, 0, id="full_gets_nothing"),
        pytest.param(0, 0, 2, 0, id="zero_capacity_gets_nothing"),
        pytest.param(5, 2, 0, 0, id="wanting_nothing_gets_nothing"),
    ],
)
def test_try_acquire__grants_min_of_wanted_and_available(
    capacity: int, held_before: int, wanted: int, granted: int
) -> None:
    slots = Slots(capacity)
    assert slots.try_acquire(held_before) == held_before
    assert slots.try_acquire(wanted) == granted
    assert slots.in_use == held_before + granted
    assert slots.available == capacity - held_before - granted


def test_release__returns_permits_for_reuse() -> None:
    slots = Slots(2)
    slots.try_acquire(2)
    slots.release(1)
    assert (slots.in_use, slots.available) == (1, 1)
    assert slots.try_acquire(5) == 1


def test_release__more_than_in_use_raises_and_changes_nothing() -> None:
    slots = Slots(3)
    slots.try_acquire(2)
    with pytest.raises(ValueError, match="cannot release 3 permits: only 2 are in use"):
        slots.release(3)
    assert slots.in_use == 2


def test_resize__shrink_keeps_held_permits_and_grants_nothing_until_under() -> None:
    slots = Slots(4)
    slots.try_acquire(4)
    slots.resize(2)
    assert (slots.capacity, slots.in_use, slots.available) == (2, 4, 0)
    slots.release(2)
    assert slots.try_acquire(1) == 0  # 2 in use, capacity 2: still full
    slots.release(1)
    assert slots.try_acquire(5) == 1


def test_resize__grow_makes_room_at_once() -> None:
    slots = Slots(1)
    slots.try_acquire(1)
    slots.resize(3)
    assert slots.try_acquire(5) == 2


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda _: Slots(-1), id="negative_capacity"),
        pytest.param(lambda s: s.try_acquire(-1), id="negative_wanted"),
        pytest.param(lambda s: s.release(-1), id="negative_release"),
        pytest.param(lambda s: s.resize(-1), id="negative_resize"),
        pytest.param(lambda s: s.try_acquire(True), id="bool_wanted"),
    ],
)
def test_negative_or_non_integer_counts__raise_value_error(call: Callable[[Slots], object]) -> None:
    slots = Slots(3)
    with pytest.raises(ValueError, match="must be an integer of at least 0"):
        call(slots)
