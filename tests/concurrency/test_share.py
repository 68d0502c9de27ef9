"""``--processes N``: a host's capacity split over its worker processes adds up, and each part is valid."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.concurrency.limits import QueueLimits
from awa_django.concurrency.rate import TokenBucket
from awa_django.concurrency.share import HostShare, part
from awa_django.concurrency.validation import validate_capacity
from awa_django.exceptions import ConfigurationError


@given(total=st.integers(0, 500), count=st.integers(1, 16), offset=st.integers(0, 50))
def test_part__the_parts_add_up_and_differ_by_at_most_one(total: int, count: int, offset: int) -> None:
    parts = [part(total, i, count, offset) for i in range(count)]
    assert sum(parts) == total
    assert max(parts) - min(parts) <= 1


@st.composite
def weighted_hosts(draw: st.DrawFn) -> tuple[int, dict[str, QueueLimits], int]:
    count = draw(st.integers(1, 8))
    names = draw(st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=8, unique=True))
    floors = [draw(st.integers(0, 12)) for _ in names]
    global_max = sum(floors) + draw(st.integers(0, 20)) or 1
    queues = {
        name: QueueLimits(
            min_workers=floor,
            weight=draw(st.integers(1, 9)),
            rate_limit=draw(st.none() | st.floats(0.5, 100)),
            rate_burst=draw(st.integers(0, 7)),
        )
        for name, floor in zip(names, floors, strict=True)
    }
    return global_max, queues, count


@given(weighted_hosts())
def test_host_share__weighted__every_number_adds_up_and_every_process_is_valid(
    host: tuple[int, dict[str, QueueLimits], int],
) -> None:
    global_max, queues, count = host
    shares = [HostShare(i, count, global_max) for i in range(count)]
    if global_max < count:
        with pytest.raises(ConfigurationError, match=f"global_max_workers={global_max} is fewer than the {count}"):
            shares[0].queues(queues)
        return
    parts = [share.queues(queues) for share in shares]
    assert sum(share.global_part or 0 for share in shares) == global_max
    for share, mine in zip(shares, parts, strict=True):
        validate_capacity(share.global_part, mine)  # its floors fit its part of the maximum
        assert sum(q.min_workers for q in mine.values()) <= (share.global_part or 0)
    for name, limits in queues.items():
        assert sum(p[name].min_workers for p in parts) == limits.min_workers
        assert all(p[name].weight == limits.weight for p in parts)
        if limits.rate_limit is not None:
            assert sum(p[name].rate_limit or 0 for p in parts) == pytest.approx(limits.rate_limit)


@given(
    count=st.integers(1, 8),
    maxima=st.dictionaries(st.text("xyz", min_size=1, max_size=2), st.integers(1, 40), min_size=1, max_size=6),
)
def test_host_share__hard_reserved__maxima_add_up_or_the_small_queue_is_named(
    count: int, maxima: dict[str, int]
) -> None:
    queues = {name: QueueLimits(max_workers=m) for name, m in maxima.items()}
    small = sorted(name for name, m in maxima.items() if m < count)
    if small:
        with pytest.raises(ConfigurationError, match=f"queue '{small[0]}' has max_workers={maxima[small[0]]}"):
            HostShare(0, count, None).queues(queues)
        return
    parts = [HostShare(i, count, None).queues(queues) for i in range(count)]
    for name, m in maxima.items():
        assert sum(p[name].max_workers for p in parts) == m
        assert all(p[name].max_workers >= 1 for p in parts)


def test_host_share__one_process_is_the_host() -> None:
    queues = {"a": QueueLimits(min_workers=3, weight=2, rate_limit=4.0, rate_burst=5)}
    assert HostShare(0, 1, 10).queues(queues) == queues
    assert HostShare(0, 1, 10).global_part == 10


def test_host_share__floors_over_the_host_maximum_are_refused_before_splitting() -> None:
    queues = {"a": QueueLimits(min_workers=6), "b": QueueLimits(min_workers=6)}
    with pytest.raises(ConfigurationError, match="12"):
        HostShare(1, 4, 10).queues(queues)


def test_worker_config__a_queue_change_is_split_and_the_host_settings_kept() -> None:
    from awa_django.worker.config import QueueConfig, build_config

    config = build_config(
        queue_rows=[],
        handler_queues=[],
        queues=["a", "b"],
        global_max_workers=7,
        process=(1, 2),
    )
    assert config.global_max_workers == 3  # process 0 takes the remainder
    assert config.host_settings() == {"a": QueueConfig("a"), "b": QueueConfig("b")}
    changed = config.with_queues({"a": QueueConfig("a", min_workers=3), "b": QueueConfig("b", min_workers=3)})
    # a's 3 floors: 1 each and the remainder to process 0; b's remainder continues with process 1.
    assert (changed.queues["a"].min_workers, changed.queues["b"].min_workers) == (1, 2)
    assert changed.host_settings()["a"].min_workers == 3
    with pytest.raises(ConfigurationError, match="8"):  # floors over the host's maximum: refused whole
        config.with_queues({"a": QueueConfig("a", min_workers=8), "b": QueueConfig("b")})


@given(
    count=st.integers(2, 8),
    rate=st.floats(0.5, 100),
    burst=st.integers(0, 40),
)
def test_host_share__rate_burst_parts_add_up_to_the_host_burst__also_the_default_one(
    count: int, rate: float, burst: int
) -> None:
    # What each process's bucket really allows at once (a burst of 0 means ceil(rate_limit)), summed
    # over the processes, is the host's: four processes of a queue limited to 10/s (burst 0, so 10)
    # each ran ceil(2.5) = 3 at once, 12 together.
    host = TokenBucket(rate, burst).burst
    if host < count:  # a process cannot have a burst of 0: each gets 1
        return
    queues = {"a": QueueLimits(max_workers=40, rate_limit=rate, rate_burst=burst)}
    parts = [HostShare(i, count, None).queues(queues) for i in range(count)]
    buckets = [TokenBucket(p["a"].rate_limit or 0, p["a"].rate_burst).burst for p in parts]
    assert sum(buckets) == host, f"host burst {host}, the processes' bursts {buckets}"


def test_host_share__default_burst_of_10_per_second_over_4_processes_is_10_not_12() -> None:
    parts = [HostShare(i, 4, 8).queues({"a": QueueLimits(rate_limit=10.0)}) for i in range(4)]
    assert sum(TokenBucket(p["a"].rate_limit or 0, p["a"].rate_burst).burst for p in parts) == 10
