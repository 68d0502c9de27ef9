"""Failure triage: the latest failed jobs grouped by kind and error signature (the exception class
plus its message with the values that vary taken out: numbers, hex ids, UUIDs, quoted text), with a
count, when the group was first and last seen, and its job ids, so a group can be retried or
discarded as one.

Reads at most ``WINDOW`` failed jobs, the most recently finalised, through the finalized_at indexes
(the page says so when there are more): backward scans of awa_job_done's failed partitions
(``awa_job_done_finalized_id_idx``, one per partition, merged newest first) and of the hot table's
``awa_job_finalized_idx``, stopped after ``WINDOW + 1`` entries, never a sort of every failed job.
A failed job with no ``finalized_at`` (only a hand-written row has none) counts as the latest.
Only the last error entry of each job is read.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import F
from django.db.models.fields.json import KT

from awa_django.models import Job, JobState
from awa_django.services.db import database_alias

WINDOW = 5000

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
# Bare hex only with a letter in it: a long run of digits is a number (N), whatever its length.
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*[a-f])[0-9a-f]{12,}\b", re.IGNORECASE)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CLASS = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Timeout\w*|[A-Z]\w*)): ")


def normalise(message: str) -> str:
    """The message with what varies between occurrences replaced: ``<uuid>``, ``<hex>``, ``'…'``, ``N``."""
    text = _UUID.sub("<uuid>", message)
    text = _HEX.sub("<hex>", text)
    text = _QUOTED.sub("'…'", text)
    return _NUMBER.sub("N", text).strip()[:300]


def signature(error: str, exception: str | None = None) -> tuple[str, str]:
    """(exception class, normalised message) of an error entry's text."""
    match = _CLASS.match(error)
    if match is not None:
        cls, message = match.group(1), error[match.end() :]
    else:
        cls, message = "", error
    if exception:
        cls = exception
    return cls, normalise(message.splitlines()[0] if message else "")


@dataclass
class FailureGroup:
    kind: str
    exception: str
    message: str
    count: int = 0
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    ids: list[int] = field(default_factory=list)
    example: str = ""

    @property
    def key(self) -> str:
        """A stable short id of the group (kind, class, message), for URLs and forms."""
        return hashlib.sha1(
            f"{self.kind}\0{self.exception}\0{self.message}".encode(), usedforsecurity=False
        ).hexdigest()[:16]


@dataclass
class Triage:
    groups: list[FailureGroup]
    read: int  # failed jobs read
    more: bool  # more failed jobs exist than WINDOW: the oldest are not grouped


def failure_groups(window: int = WINDOW) -> Triage:
    """The latest ``window`` failed jobs grouped, largest group first."""
    rows = list(
        Job.objects.using(database_alias())
        .filter(state=JobState.FAILED)
        # DESC with Postgres's default NULLS FIRST: the order of a backward scan of the index, so
        # the read stops after window + 1 entries; NULLS LAST would sort every failed job first.
        .order_by(F("finalized_at").desc(), "-id")
        .annotate(last_error=KT("errors__-1__error"), last_exception=KT("errors__-1__exception"))
        .values_list("id", "kind", "finalized_at", "last_error", "last_exception")[: window + 1]
    )
    groups: dict[tuple[str, str, str], FailureGroup] = {}
    for job_id, kind, finalized_at, error, exception in rows[:window]:
        cls, message = signature(error or "", exception)
        group = groups.get((kind, cls, message))
        if group is None:
            group = groups[(kind, cls, message)] = FailureGroup(kind, cls, message, example=(error or "")[:500])
        group.count += 1
        group.ids.append(job_id)
        if finalized_at is not None:
            group.first_seen = finalized_at if group.first_seen is None else min(group.first_seen, finalized_at)
            group.last_seen = finalized_at if group.last_seen is None else max(group.last_seen, finalized_at)
    ordered = sorted(groups.values(), key=lambda g: (-g.count, g.kind, g.exception, g.message))
    return Triage(ordered, min(len(rows), window), len(rows) > window)
