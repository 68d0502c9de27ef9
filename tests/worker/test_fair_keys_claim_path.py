"""The fair-key allocator together with the claim path, over random histories, on real Postgres.

Hypothesis draws keys (weights, caps, run times, job priorities), one or two claimers (each a
worker's ``KeyedClaims`` with its own slots and discovery cursors) and a key that arrives late.
Time is virtual: each claimed job runs its key's run time, then its row is completed and its
claimer told (``KeyedClaims.attempt_ended``); the completion of a capped key's attempt sends, in
its transaction, the writer's NOTIFY (``notify_freed_keys``), which a LISTEN connection hears and
hands to every claimer as a worker's listener does (``parse_freed``, ``key_freed``); and the freed
slots are claimed again with the real SQL (``claim_keyed_jobs``, the capped path's locks and counts,
``find_arrivals`` when the late key's jobs are inserted). Properties:

- every key has backlog throughout, so each key's share of the slot-seconds after a warm-up is
  within 5 % of its water-fill share (``water_fill`` over every key's weight and cap), give or take
  one of its attempts (a slot cannot hold part of one: over a short run with one slot that step is
  larger than 5 %); a capped key's to within one attempt per claimer (see the bound below);
- the late key is served within as many slot grants to other keys as there are keys;
- at every claim, no key has more rows running than its cap (counted in the database);
- each key's jobs are claimed in its own (priority, id) order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from awa_django.concurrency.keyconfig import QueueKeySettings
from awa_django.concurrency.waterfill import water_fill
from awa_django.context import ClaimedJob
from awa_django.sql import FREED_KEYS_CHANNEL, statements
from awa_django.worker.db import make_pool
from awa_django.worker.keyed import KeyedClaims, parse_freed
from awa_django.worker.lanes import LaneCursors
from tests.conftest import connect_outside_django

QUEUE = "keyed-sim"
HORIZON = 240  # virtual seconds
WARM_UP = 60  # the share is measured over [WARM_UP, HORIZON)
LATE_AT = 15  # when the late key's jobs are inserted


@dataclass(frozen=True)
class KeySpec:
    weight: int
    cap: int | None
    seconds: int
    priorities: tuple[int, ...]


key_specs = st.builds(
    KeySpec,
    weight=st.integers(1, 4),
    cap=st.one_of(st.none(), st.integers(1, 3)),
    seconds=st.integers(1, 3),
    priorities=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
)
histories = st.fixed_dictionaries(
    {
        "keys": st.lists(key_specs, min_size=2, max_size=5),
        "slots": st.lists(st.integers(1, 4), min_size=1, max_size=2),  # per claimer
    }
)


@dataclass
class Running:
    end: int
    claimer: int
    job: ClaimedJob
    start: int


@dataclass
class Outcome:
    held: dict[str, float] = field(default_factory=dict)
    claimed_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    over_cap: list[tuple[int, str, int]] = field(default_factory=list)
    late_waited: int | None = None  # grants to other keys between the late key's arrival and its first
    late_served: bool = False

    def ran(self, key: str, start: int, end: int) -> None:
        overlap = min(end, HORIZON) - max(start, WARM_UP)
        if overlap > 0:
            self.held[key] = self.held.get(key, 0.0) + overlap


def insert(key: str, spec: KeySpec, n: int) -> None:
    """``n`` due jobs of ``key``, priorities cycling through the spec's, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_job (kind, queue, fair_key, args, state, priority, attempt, max_attempts, run_at,"
            " created_at, errors, metadata, tags, run_lease)"
            " SELECT 'noop', %s, %s, '{}', 'available', (%s::int[])[1 + g %% %s], 0, 25,"
            " now() - interval '1 minute', now(), '[]', '{}', '{}', 0 FROM generate_series(1, %s) AS g",
            [QUEUE, key, list(spec.priorities), len(spec.priorities), n],
        )


def running_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT fair_key, count(*) FROM awa_job WHERE queue = %s AND state = 'running' GROUP BY fair_key",
            [QUEUE],
        )
        return {key: int(n) for key, n in cursor.fetchall()}


def complete(ended: list[ClaimedJob], capped: set[str]) -> None:
    """Complete the rows and, in the same transaction, announce the capped keys' ends as the writer does."""
    freed = [job.fair_key for job in ended if job.fair_key in capped]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job SET state = 'completed', finalized_at = now() WHERE id = ANY(%s::bigint[])",
            [[job.id for job in ended]],
        )
        if freed:
            cursor.execute(
                statements["notify_freed_keys"],
                {"channel": FREED_KEYS_CHANNEL, "queues": [QUEUE] * len(freed), "keys": freed},
            )


def hear(listen: psycopg.Connection[Any], expected: int, claimers: list[KeyedClaims]) -> None:
    """The ``expected`` freed-key notifications (Postgres folds repeats within a transaction),
    handed to every claimer as each worker's listener does."""
    if expected == 0:
        return
    heard = [parse_freed(n.payload) for n in listen.notifies(timeout=10, stop_after=expected)]
    assert len(heard) == expected, f"heard {len(heard)} of {expected} freed-key notifications"
    for notice in heard:
        assert notice is not None and notice[0] == QUEUE, notice
        for claimer in claimers:
            claimer.key_freed(notice[1])


def simulate(keys: dict[str, KeySpec], slots: list[int], late: str) -> Outcome:
    """Run the history; synchronous ORM calls between the claims (the claims on their own pool)."""
    settings_in_force = QueueKeySettings(overrides={key: (spec.weight, spec.cap) for key, spec in keys.items()})
    outcome = Outcome()
    loop = asyncio.new_event_loop()
    pool = make_pool("default", 2)
    capped = {key for key, spec in keys.items() if spec.cap is not None}
    listen = connect_outside_django()
    listen.execute(f"LISTEN {FREED_KEYS_CHANNEL}")
    try:
        loop.run_until_complete(pool.open(wait=True))
        claimers = [KeyedClaims(QUEUE, settings_in_force) for _ in slots]
        lanes = [LaneCursors() for _ in slots]
        for claimer, cursors in zip(claimers, lanes, strict=True):
            loop.run_until_complete(claimer.start(pool, cursors))
        running: list[Running] = []
        late_arrived = False
        now = 0
        while now < HORIZON:
            ended = [r for r in running if r.end <= now]
            if ended:
                complete([r.job for r in ended], capped)
                running = [r for r in running if r.end > now]
                for r in ended:
                    claimers[r.claimer].attempt_ended(r.job.fair_key, float(r.end - r.start))
                    claimers[r.claimer].unblock()
                hear(listen, len({r.job.fair_key for r in ended} & capped), claimers)
            if not late_arrived and now >= LATE_AT:
                insert(late, keys[late], total_jobs(keys[late], slots))
                for claimer, cursors in zip(claimers, lanes, strict=True):
                    loop.run_until_complete(claimer.read_arrivals(pool, cursors))
                late_arrived = True
                outcome.late_waited = 0
            for index, (claimer, size) in enumerate(zip(claimers, slots, strict=True)):
                free = size - sum(1 for r in running if r.claimer == index)
                jobs = []
                # As a runner does: claim again at once while slots are free and a key may take one
                # (a grant the other claimer's cap refused went back and blocked only its key).
                while free > 0 and claimer.shares.has_eligible():
                    more = loop.run_until_complete(claimer.claim(pool, free, None))
                    jobs += more
                    free -= len(more)
                for job in sorted(jobs, key=lambda j: (j.priority, j.id)):  # RETURNING has no order
                    seconds = keys[job.fair_key].seconds
                    running.append(Running(now + seconds, index, job, now))
                    outcome.ran(job.fair_key, now, now + seconds)
                    outcome.claimed_order.setdefault(job.fair_key, []).append((job.priority, job.id))
                if late_arrived and not outcome.late_served:
                    # One claim's grants were picked together: the late key's place among them is
                    # not known, so all of this claim's other grants count against it.
                    outcome.late_waited = (outcome.late_waited or 0) + sum(1 for j in jobs if j.fair_key != late)
                    outcome.late_served = any(job.fair_key == late for job in jobs)
                for key, n in running_counts().items():
                    cap = keys[key].cap
                    if cap is not None and n > cap:
                        outcome.over_cap.append((now, key, n))
            now = min((r.end for r in running), default=HORIZON)
    finally:
        listen.close()
        loop.run_until_complete(pool.close())
        loop.close()
    return outcome


def total_jobs(spec: KeySpec, slots: list[int]) -> int:
    """Enough jobs that the key never runs out before the horizon, whatever share it gets."""
    return sum(slots) * HORIZON // spec.seconds + 10


@pytest.mark.django_db(transaction=True)
# Each example runs hundreds of claims: shrinking a failure would take many minutes, so a failing
# history is reported as drawn.
@settings(
    max_examples=8,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(history=histories)
@example(
    history={
        "slots": [1, 2],
        "keys": [
            KeySpec(weight=3, cap=1, seconds=3, priorities=(3, 3, 1, 4)),
            KeySpec(weight=1, cap=None, seconds=3, priorities=(1, 4)),
            KeySpec(weight=4, cap=None, seconds=2, priorities=(2, 1, 2, 2)),
        ],
    }
)
def test_claim_path__backlogged_keys_get_their_water_fill__a_late_key_is_served_soon__caps_hold(
    history: dict[str, Any],
) -> None:
    check_history(history)


@pytest.mark.django_db(transaction=True)
def test_claim_path__capped_key_across_two_claimers__the_recorded_gap_closes() -> None:
    """Recorded as a known gap (an xfail): k0 held 0.371 of the slot-seconds against its 0.400
    (cap 3, claimers of 4 and 3 slots), as each claimer rotated by what it served itself. Since keys
    of one quantum go oldest next job first, an order both claimers read from the same table, it
    holds 0.404. The general property keeps its tolerance of an attempt per claimer for a capped key
    (``check_history``); this case is held to one attempt, as an uncapped key is."""
    check_history(
        {
            "slots": [4, 3],
            "keys": [
                KeySpec(weight=4, cap=3, seconds=1, priorities=(2, 2)),
                KeySpec(weight=4, cap=None, seconds=3, priorities=(2, 2, 1, 1)),
                KeySpec(weight=2, cap=2, seconds=3, priorities=(2, 4, 1, 1)),
            ],
        },
        capped_step_per_claimer=False,
    )


def check_history(history: dict[str, Any], *, capped_step_per_claimer: bool = True) -> None:
    """Run one history and assert the module docstring's properties."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM awa_job WHERE queue = %s", [QUEUE])
    specs: list[KeySpec] = history["keys"]
    slots: list[int] = history["slots"]
    keys = {f"k{i}": spec for i, spec in enumerate(specs)}
    late = f"k{len(specs) - 1}"
    for key, spec in keys.items():
        if key != late:
            insert(key, spec, total_jobs(spec, slots))
    outcome = simulate(keys, slots, late)

    assert outcome.over_cap == [], outcome.over_cap
    for key, order in outcome.claimed_order.items():
        if key != late:
            assert order == sorted(order), f"{key} claimed out of its priority order"
    assert outcome.late_served, "the late key was never served"
    assert outcome.late_waited is not None and outcome.late_waited <= len(keys) + sum(slots), outcome.late_waited
    ideal = water_fill(float(sum(slots)), {k: s.weight for k, s in keys.items()}, {k: s.cap for k, s in keys.items()})
    total_ideal = sum(ideal.values())
    total_held = sum(outcome.held.values())
    for key in keys:
        want = ideal[key] / total_ideal
        got = outcome.held.get(key, 0.0) / total_held
        # A slot cannot hold part of an attempt: the measured share moves in steps of one attempt.
        step = keys[key].seconds / total_held
        if keys[key].cap is not None and capped_step_per_claimer:
            # A capped key's cap is exact across claimers, its share only to within an attempt per
            # claimer: a claimer held back by the cap learns of each end at once (the NOTIFY), but
            # can take the key only at its own next free slot, and each claimer rotates by what it
            # served itself, so the claimer whose attempt ended may give that slot to another key
            # (the recorded example: 0.307 against 0.333, cap 1 over two claimers, with or without
            # the NOTIFY).
            step *= len(slots)
        assert abs(got - want) <= 0.05 * want + step, (key, got, want, keys, slots)
