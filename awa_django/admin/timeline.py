"""A job's attempts on one line each, for its admin page: when each started and ended, how long it
ran, on which worker, how it ended, and its error. Read from the error history (each entry carries
its attempt's start and worker when a worker ran it) and, for the latest attempt, from the row
itself.

Every time on the job page is written by ``shown_time`` (to the second, in the operator's time
zone: Django's current one), every duration by ``shown_duration``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.context import ATOMIC_ENTRY_KEY
from awa_django.models import Job, JobState
from awa_django.registry import registry
from awa_django.services.stats import format_age
from awa_django.services.steps import RESTARTED

TIME_FORMAT = "Y-m-d H:i:s T"


@dataclass(frozen=True)
class Attempt:
    number: int | str
    started: datetime | None
    ended: datetime | None
    worker: str | None
    outcome: str
    error: str = ""
    # Ran as an atomic attempt (@job(atomic=True)): its writes committed with its completion, or,
    # when it raised, were rolled back. Shown beside the outcome.
    atomic: bool = False

    @property
    def duration(self) -> timedelta | None:
        if self.started is None or self.ended is None:
            return None
        return max(self.ended - self.started, timedelta(0))


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return parse_datetime(value)
        except ValueError:
            return None
    return None


def attempts_of(job: Job) -> list[Attempt]:
    """The attempts the row records, oldest first."""
    entries = [e for e in (job.errors if isinstance(job.errors, list) else []) if isinstance(e, dict)]
    attempts = []
    for entry in entries:
        error = str(entry.get("error", ""))
        if error.startswith(f"{JobState.CANCELLED.value}:"):
            outcome = JobState.CANCELLED.value
        elif error.startswith(f"{RESTARTED}:"):  # an operator's restart from a step (services/steps.py)
            outcome = RESTARTED
        else:
            outcome = "error"
        attempts.append(
            Attempt(
                entry.get("attempt", "?"),
                _when(entry.get("started_at")),
                _when(entry.get("at")),
                entry.get("worker") if isinstance(entry.get("worker"), str) else None,
                outcome,
                error,
                entry.get(ATOMIC_ENTRY_KEY) is True,
            )
        )
    recorded = {a.number for a in attempts}
    if job.attempt and job.attempt not in recorded and job.attempted_at is not None:
        ended = job.finalized_at if job.state != JobState.RUNNING else None
        # The latest attempt has no entry of its own: atomic when the kind's handler is, as this
        # process's code declares it (the worker's is the same code, deployed together).
        handler = registry.registered(job.kind)
        atomic = handler is not None and handler.atomic
        attempts.append(Attempt(job.attempt, job.attempted_at, ended, job.attempted_by, job.state, atomic=atomic))
    return attempts


def shown_time(value: datetime | str | None) -> str:
    """A time as the job page writes each of its times: ``2026-12-04 20:10:17 UTC``; ``—`` for none.

    A string is read as the ISO time an error entry stores, and shown as it is when it is not one.
    """
    when = _when(value)
    if when is None:
        return "—" if value is None or value == "" else str(value)
    if timezone.is_naive(when):
        when = timezone.make_aware(when, timezone.get_default_timezone())
    return format_date(timezone.localtime(when), TIME_FORMAT)


def shown_duration(value: timedelta | None) -> str:
    """``4 ms`` under a second (a quick attempt is not ``0s``); ``3s``, ``4m 05s``… from a second on."""
    if value is None or value >= timedelta(seconds=1):
        return format_age(value)
    milliseconds = int(value.total_seconds() * 1000)  # down, as format_age rounds its seconds
    return f"{milliseconds} ms" if milliseconds >= 1 else "<1 ms"


def time_field(name: str, description: str) -> Callable[[Any, Job], str]:
    """A read-only field of the admin that shows the row's ``name`` time by ``shown_time``."""

    @admin.display(description=description, ordering=name)
    def shown(model_admin: Any, obj: Job) -> str:
        return shown_time(getattr(obj, name))

    shown.__name__ = f"{name}_shown"
    return shown


def attempt_timeline(job: Job) -> SafeString:
    attempts = attempts_of(job)
    if not attempts:
        return format_html('<span class="awa-muted">{}</span>', "not run yet")
    now = timezone.now()
    rows = format_html_join(
        "",
        '<tr class="awa-attempt" data-attempt="{}"><td>{}</td><td class="awa-nowrap">{}</td>'
        '<td class="awa-nowrap">{}</td><td class="awa-nowrap">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
        (
            (
                a.number,
                a.number,
                shown_time(a.started),
                shown_time(a.ended) if a.ended or a.outcome != JobState.RUNNING else JobState.RUNNING.value,
                shown_duration(a.duration if a.ended else (now - a.started if a.started else None)),
                a.worker or "—",
                f"{a.outcome} (atomic)" if a.atomic else a.outcome,
                a.error[:300],
            )
            for a in attempts
        ),
    )
    return format_html(
        '<table class="awa-table awa-timeline"><thead><tr><th>attempt</th><th>started</th><th>ended</th>'
        "<th>ran</th><th>worker</th><th>outcome</th><th>error</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )
