"""The snapshot flags an operator's requests show (``draining``, ``held_queues``): written and
read back through the one schema, older rows without them read as neither, and a value that is
not a list of names is refused naming it. Pure: no database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.snapshot import SnapshotFormatError, WorkerFlags
from awa_django.worker.config import QueueConfig
from awa_django.worker.control import held_view, with_holds

BASE = {"listening": True, "leader": False, "stopping": False, "in_flight": 0, "sync_running": 0,
        "capacity_scope": "process"}  # fmt: skip


@given(draining=st.booleans(), held=st.lists(st.text(max_size=20), unique=True, max_size=5))
def test_flags__draining_and_held_queues_round_trip(draining: bool, held: list[str]) -> None:
    flags = WorkerFlags(**BASE, draining=draining, held_queues=tuple(sorted(held)))  # type: ignore[arg-type]
    assert WorkerFlags.from_json(flags.to_json()) == flags


def test_flags__an_older_worker_s_row_reads_as_not_draining_and_holding_nothing() -> None:
    flags = WorkerFlags.from_json(BASE)
    assert (flags.draining, flags.held_queues) == (False, ())


@pytest.mark.parametrize("value", ["emails", [1], {"emails": True}, [None]])
def test_flags__held_queues_not_a_list_of_names__refused_naming_it(value: object) -> None:
    with pytest.raises(SnapshotFormatError, match=r"'held_queues' must be a list of queue names, got "):
        WorkerFlags.from_json({**BASE, "held_queues": value})


@given(
    min_workers=st.integers(0, 50),
    max_workers=st.integers(1, 50),
    paused=st.booleans(),
    held=st.sets(st.sampled_from(["a", "b", "c"])),
)
def test_with_holds__held_queues_paused_with_no_floor__the_others_untouched(
    min_workers: int, max_workers: int, paused: bool, held: set[str]
) -> None:
    queues = {
        name: QueueConfig(name, max_workers=max_workers, min_workers=min_workers, paused=paused) for name in "abc"
    }
    applied = with_holds(queues, frozenset(held))
    for name, queue in applied.items():
        if name in held:
            assert queue == held_view(queues[name])
            assert queue.paused and queue.min_workers == 0 and queue.max_workers == max_workers
        else:
            assert queue == queues[name]
