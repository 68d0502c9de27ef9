"""Helpers for durable-job tests: a registry of one kind, in-process attempts of one job, reads
of its steps and its row, and moving a parked job's clock (its wake time and run_at) to now."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from awa_django.inline.attempt import claim, run_claimed
from awa_django.inline.run import JobRun
from awa_django.models import Job, JobEvent, JobStep
from awa_django.registry import JobHandler, Registry

FAR = datetime(2100, 1, 1, tzinfo=datetime.now().astimezone().tzinfo)


def registry_of(
    kind: str, func: Callable[..., Any], *, queue: str = "durable", max_attempts: int = 25, atomic: bool = False
) -> Registry:
    registry = Registry()
    registry.register(JobHandler(kind, func, queue=queue, takes_context=True, max_attempts=max_attempts, atomic=atomic))
    return registry


def run_once(job_id: int, registry: Registry, now: datetime = FAR) -> JobRun | None:
    """One in-process attempt of the job, if it is due by ``now`` (its retry backoff is skipped by
    the far-future default); None if it is not claimable (parked in ``waiting``, finished)."""
    claimed = claim("default", now=now, limit=1, ids=[job_id])
    if not claimed:
        return None
    return run_claimed("default", claimed[0], registry)


def state_of(job_id: int) -> str:
    return Job.objects.values_list("state", flat=True).get(id=job_id)


def steps_of(job_id: int) -> dict[str, JobStep]:
    return {step.name: step for step in JobStep.objects.filter(job_id=job_id)}


def events_of(job_id: int) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job_id=job_id).order_by("id"))


def expire(job_id: int) -> None:
    """Move the job's sleep or wait deadline, and its run_at, to the past: as if its time came."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job_step SET wake_at = wake_at - interval '1 day', "
            "finished_at = CASE WHEN kind = 'sleep' THEN finished_at - interval '1 day' ELSE finished_at END "
            "WHERE job_id = %s",
            [job_id],
        )
        cursor.execute("UPDATE awa_job SET run_at = now() - interval '1 second' WHERE id = %s", [job_id])


def ago(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
