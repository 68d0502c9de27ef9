"""The job page's attempt timeline says which attempts ran atomically (``@job(atomic=True)``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone

from awa_django.admin.timeline import attempt_timeline, attempts_of
from awa_django.context import ATOMIC_ENTRY_KEY
from awa_django.models import Job
from awa_django.registry import JobHandler, registry

KIND = "admin.atomic_charge"


def charge() -> None: ...


@pytest.fixture
def atomic_kind() -> Iterator[str]:
    registry.register(JobHandler(KIND, charge, atomic=True))
    try:
        yield KIND
    finally:
        registry.unregister(KIND)


def _job(kind: str, errors: list[dict[str, object]]) -> Job:
    now = timezone.now()
    return Job(kind=kind, state="completed", attempt=2, attempted_at=now, finalized_at=now, errors=errors)


def test_timeline__atomic_attempts__marked_beside_their_outcome(atomic_kind: str) -> None:
    job = _job(atomic_kind, [{"error": "ValueError: declined", "attempt": 1, ATOMIC_ENTRY_KEY: True}])
    attempts = attempts_of(job)
    assert [(a.number, a.outcome, a.atomic) for a in attempts] == [(1, "error", True), (2, "completed", True)]
    html = str(attempt_timeline(job))
    assert "<td>error (atomic)</td>" in html
    assert "<td>completed (atomic)</td>" in html


def test_timeline__plain_attempts__not_marked() -> None:
    job = _job("admin.plain", [{"error": "ValueError: declined", "attempt": 1}])
    assert [a.atomic for a in attempts_of(job)] == [False, False]
    assert "(atomic)" not in str(attempt_timeline(job))
