"""What runs now, and where: the running jobs, per worker (``Job.attempted_by``, the ``host:pid``
the claim wrote) or per queue, for the admin's "Running now" page and its JSON.

One query on the running rows (the running-only partial indexes keep it to the rows that run now,
never the history), bounded by ``limit``, oldest attempt first; the live workers' snapshots say
who is alive. Reads only; no locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from awa_django.models import Job, JobState
from awa_django.services.db import database_alias

RUNNING_LIMIT = 500  # rows shown at most; the page says when more run


@dataclass(frozen=True)
class RunningJob:
    id: int
    kind: str
    queue: str
    worker: str | None  # host:pid; None when no worker claimed it (in-process)
    started_at: datetime | None
    attempt: int
    max_attempts: int
    progress: Any

    def elapsed(self, now: datetime) -> timedelta | None:
        return None if self.started_at is None else max(now - self.started_at, timedelta(0))

    def elapsed_seconds(self, now: datetime) -> float | None:
        elapsed = self.elapsed(now)
        return None if elapsed is None else elapsed.total_seconds()

    def as_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "queue": self.queue,
            "worker": self.worker,
            "started_at": None if self.started_at is None else self.started_at.isoformat(),
            "elapsed_seconds": self.elapsed_seconds(now),
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "progress": self.progress,
        }


@dataclass(frozen=True)
class RunningNow:
    jobs: list[RunningJob]
    more: bool  # more than ``limit`` run: only the oldest ``limit`` are listed
    now: datetime

    def by_worker(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.worker or "—"] = counts.get(job.worker or "—", 0) + 1
        return counts


def running_now(
    worker: str | None = None, queue: str | None = None, limit: int = RUNNING_LIMIT, now: datetime | None = None
) -> RunningNow:
    """The running jobs (of ``worker``, of ``queue``), oldest attempt first, at most ``limit``."""
    rows = Job.objects.using(database_alias()).filter(state=JobState.RUNNING)
    if worker:
        rows = rows.filter(attempted_by=worker)
    if queue:
        rows = rows.filter(queue=queue)
    fetched = list(
        rows.order_by("attempted_at", "id").values_list(
            "id", "kind", "queue", "attempted_by", "attempted_at", "attempt", "max_attempts", "progress"
        )[: limit + 1]
    )
    jobs = [RunningJob(*row) for row in fetched[:limit]]
    return RunningNow(jobs, len(fetched) > limit, now or timezone.now())
