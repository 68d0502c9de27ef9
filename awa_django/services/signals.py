"""Events sent to durable jobs (``Job.objects.signal``; docs/guide/durable-jobs.md).

A signal keeps the event (``awa_job_event``) until a ``wait_for`` of the job takes it, and wakes
the job at once when it is parked in a wait for that event: the row becomes available and due
now, and its queue is told by NOTIFY at commit, as an enqueue does (or found at the next poll).

Transaction: the signal runs on the caller's Django connection, inside its transaction if one is
open (an atomic block of its own, a savepoint, otherwise), so an event sent with the rows that
caused it commits, or rolls back, with them.

Locking contract: it locks the job's hot row (FOR NO KEY UPDATE, lock_signalled_job) before it
writes the event, and holds it to the commit; a worker parking the job meanwhile waits for it,
then finds the event in its next statement (wake_signalled_jobs). Two statements per signal.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import connections, transaction

from awa_django.defaults import NAME_MAX_LENGTH
from awa_django.exceptions import SignalError
from awa_django.sql import statements
from awa_django.states import TERMINAL_STATES
from awa_django.storable import to_json
from awa_django.validation import brief


class SignalSent(NamedTuple):
    """A kept event: its id, and the queue of the job it woke (None: the job was not parked waiting
    for it; the event waits for the job's ``wait_for``)."""

    event_id: int
    woke_queue: str | None

    @property
    def woke(self) -> bool:
        return self.woke_queue is not None


def send_signal(alias: str, job_id: int, event: str, payload: Any = None) -> SignalSent:
    """Send ``event`` with ``payload`` (JSON) to job ``job_id`` on Django's connection ``alias``.

    ``SignalError`` if the job does not exist or has finished (naming it and its state);
    ``ValueError`` for an event name or payload that cannot be kept, naming it and the fix."""
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise ValueError(f"signal: job_id={brief(job_id)} must be a job's id (an int)")
    if not isinstance(event, str) or not event or len(event) > NAME_MAX_LENGTH:
        raise ValueError(
            f"signal to job {job_id}: event={brief(event)} must be a non-empty string of at most "
            f"{NAME_MAX_LENGTH} characters"
        )
    text = to_json(payload, f"the payload of event {event!r} to job {job_id}")
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(statements["lock_signalled_job"], {"id": job_id})
        row = cursor.fetchone()
        if row is None or row[0] in TERMINAL_STATES:
            state = row[0] if row is not None else None
            if state is None:
                cursor.execute(statements["read_job_state"], {"id": job_id})
                found = cursor.fetchone()
                state = None if found is None else found[0]
            raise SignalError(job_id, event, state)
        cursor.execute(statements["signal_job"], {"id": job_id, "event": event, "payload": text})
        event_id, queue, _ = cursor.fetchone()
    return SignalSent(event_id, queue)
