"""The sweep's pass over the keys it found (KeyedClaims.sweep_pass): pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from awa_django.concurrency.keyconfig import QueueKeySettings
from awa_django.worker.keyed import UNKNOWN_BACKLOG, KeyedClaims

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_sweep_pass__offers_unknown_keys_only_and_moves_a_cursor_back() -> None:
    claims = KeyedClaims("q", QueueKeySettings())
    claims.shares.offer("known", 3)
    claims.cursors["behind"] = (2, T0, 50)
    claims.cursors["ahead"] = (2, T0, 5)
    offered = claims.sweep_pass([("known", 2, T0, 1), ("behind", 2, T0, 10), ("ahead", 2, T0, 9)])
    assert offered == 2  # "behind" and "ahead"; "known" already has its backlog
    assert claims.shares.backlog("known") == 3
    assert claims.shares.backlog("behind") == UNKNOWN_BACKLOG
    assert claims.cursors["behind"] == (2, T0, 9)  # its next claim starts at the job found
    assert claims.cursors["ahead"] == (2, T0, 5)  # the job found lies after it: left alone


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 4), st.integers(0, 5), st.integers(1, 99)),
        max_size=12,
    ),
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]), st.tuples(st.integers(1, 4), st.integers(0, 5), st.integers(1, 99))
    ),
)
def test_sweep_pass__every_job_found_is_at_or_after_its_key_cursor(
    found: list[tuple[str, int, int, int]], cursors: dict[str, tuple[int, int, int]]
) -> None:
    claims = KeyedClaims("q", QueueKeySettings())
    for key, (priority, minutes, job_id) in cursors.items():
        claims.cursors[key] = (priority, T0 + timedelta(minutes=minutes), job_id)
    rows = [(key, priority, T0 + timedelta(minutes=minutes), job_id) for key, priority, minutes, job_id in found]
    claims.sweep_pass(rows)
    for key, priority, run_at, job_id in rows:
        assert claims.shares.backlog(key) > 0
        cursor_at = claims.cursors.get(key)
        assert cursor_at is None or (priority, run_at, job_id) > cursor_at  # the claim's scan reaches it
