"""Finished attempts as the statements that write them: the one builder of their parameters.

The worker's batch writer (``completer``) and in-process execution (``awa_django.inline``) both
write outcomes through ``outcome_writes``, so a state is stored the same way whoever ran the
attempt. A bare completion (no result, no progress) goes to ``complete_jobs``, the cheap
statement of the common case (``complete_job`` when it is the only one: the same statement with
scalar parameters, whose prepared plan Postgres keeps); every other outcome goes to
``finalize_jobs``. All match
(id, running, run_lease) and return the ids they wrote. A durable job parked in a wait is
followed by ``wake_signalled_jobs``, which wakes it if its event came while it parked (it returns
a subset of the ids just written).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from awa_django.context import ClaimedJob, Outcome
from awa_django.storable import escape_json


class Finished(Protocol):
    """One attempt's outcome as it is written: ``progress`` is JSON text, None keeps the stored one."""

    @property
    def job(self) -> ClaimedJob: ...

    @property
    def outcome(self) -> Outcome: ...

    @property
    def progress(self) -> str | None: ...


class Written(NamedTuple):
    """A ``Finished`` for one attempt written on its own (in-process execution)."""

    job: ClaimedJob
    outcome: Outcome
    progress: str | None


def outcome_writes(entries: Sequence[Finished]) -> list[tuple[str, dict[str, Any]]]:
    """(statement name, parameters) for each statement these outcomes need, in the order to run them."""
    complete: list[ClaimedJob] = []
    final: list[Finished] = []
    for entry in entries:
        if entry.progress is None and entry.outcome.bare:  # completed with nothing else to store
            complete.append(entry.job)
        else:
            final.append(entry)
    writes: list[tuple[str, dict[str, Any]]] = []
    if len(complete) == 1:  # one completion (an atomic attempt's, a quiet worker's): its scalar statement
        writes.append(("complete_job", {"id": complete[0].id, "lease": complete[0].run_lease}))
    elif complete:
        writes.append(
            ("complete_jobs", {"ids": [job.id for job in complete], "leases": [job.run_lease for job in complete]})
        )
    if final:
        writes.append(
            (
                "finalize_jobs",
                {
                    "ids": [e.job.id for e in final],
                    "leases": [e.job.run_lease for e in final],
                    "states": [e.outcome.state.value for e in final],
                    "delays": [e.outcome.delay for e in final],
                    "errors": [
                        None if e.outcome.error is None else json.dumps(escape_json(e.outcome.error), default=str)
                        for e in final
                    ],
                    "refunds": [e.outcome.refund for e in final],
                    "progress": [e.progress for e in final],
                    "results": [e.outcome.result for e in final],
                },
            )
        )
        waits = [e.job for e in final if e.outcome.waits_event]
        if waits:  # after the park, in the same transaction: an event that came meanwhile wakes it
            writes.append(
                ("wake_signalled_jobs", {"ids": [job.id for job in waits], "leases": [job.run_lease for job in waits]})
            )
    return writes
