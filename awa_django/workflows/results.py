"""Results between steps: what a handler reads of its upstream jobs (``context.upstream(name)``).

Read when the handler asks, with one query over the job's in-edges (``read_upstream_results``),
on Django's connection: a ``def`` handler calls ``context.upstream(name)``; an ``async def``
handler awaits ``context.aupstream(name)`` (Django's ORM refuses sync queries on the event loop).
In ``run_jobs`` and immediate mode the query runs in the caller's transaction, like the handler.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

from awa_django.conf import awa_settings
from awa_django.sql import statements
from awa_django.states import JobState


class UpstreamError(LookupError):
    """An upstream result that cannot be given: no upstream of that name, several of them, or one
    that did not complete (reached through an ``always`` edge)."""


@dataclass(frozen=True, slots=True)
class UpstreamResult:
    """One upstream job of a step: its edge name, id, state, and stored result (None if none)."""

    name: str
    job_id: int
    state: str | None  # None: the row is gone (retention deleted it)
    result: Any

    @property
    def completed(self) -> bool:
        return self.state == JobState.COMPLETED


def read_upstreams(job_id: int, using: str | None = None) -> list[UpstreamResult]:
    """The upstream jobs of ``job_id``, by upstream id."""
    alias = using or awa_settings().DATABASE_ALIAS
    with connections[alias].cursor() as cursor:
        cursor.execute(statements["read_upstream_results"], {"id": job_id})
        rows = cursor.fetchall()
    return [
        UpstreamResult(name, up_id, state, json.loads(result) if isinstance(result, str | bytes) else result)
        for name, up_id, state, result in rows
    ]


def pick(job_id: int, upstreams: Sequence[UpstreamResult], name: str) -> Any:
    """The result of the one completed upstream named ``name``; UpstreamError naming what exists."""
    found = [u for u in upstreams if u.name == name]
    if not found:
        known = ", ".join(sorted({repr(u.name) for u in upstreams})) or "none"
        raise UpstreamError(f"job {job_id} has no upstream named {name!r}; its upstreams: {known}")
    if len(found) > 1:
        raise UpstreamError(
            f"job {job_id} has {len(found)} upstreams named {name!r} (jobs {', '.join(str(u.job_id) for u in found)}); "
            "read them all with context.upstreams(name)"
        )
    [one] = found
    if not one.completed:
        raise UpstreamError(f"upstream {name!r} of job {job_id} (job {one.job_id}) is {one.state}: it has no result")
    return one.result
