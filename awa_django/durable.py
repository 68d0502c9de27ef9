"""Durable jobs: a handler's steps, sleeps and waits, kept in the database across its attempts.

The model is replay (docs/guide/durable-jobs.md). Each attempt runs the handler from the top; a
step that completed in an earlier attempt returns its stored result without running again. So:

- ``step(name, fn)``: the first time, runs ``fn`` and stores its JSON result (``awa_job_step``)
  before returning it; afterwards, returns the stored result. The record is written on the
  handler's Django connection to the jobs' database: inside an atomic handler's transaction it
  commits with it (and rolls back with it); elsewhere it commits on its own as the step ends.
  The first record of a name wins (a rescued attempt's late record is not written over).
- ``sleep``: recorded as a step with its wake time; the attempt ends at once (``Parked``), the
  job is ``scheduled`` for the wake time with its attempt given back, and its slot is freed. On
  resume the handler runs from the top and the sleep returns at once (or parks again for what is
  left, if something woke the job early).
- ``wait_for``: takes the oldest event of that name sent to the job (``awa_job_event``: kept from
  whenever it was sent) and records its payload as the wait's result. With none, the wait is
  recorded in force (no ``finished_at``) and the job parks: ``scheduled`` at its deadline, or
  ``waiting`` without one; neither state is in a claim index. A signal wakes it
  (``awa_django.services.signals``). At the deadline with no event, the wait ends timed out and
  ``WaitTimeout`` is raised, then and at every later attempt.

No lost wake-up: a signal locks the job's row before it keeps its event (lock_signalled_job), and
the writer that parks a job in a wait looks for its event again in a later statement of the same
transaction (wake_signalled_jobs). Whichever of the two takes the row first, the other sees it.

Step names are unique within a job: a second use in one run is ``DuplicateStepError``. Sleeps and
waits get names of their own when not given one (``sleep#1``, ``wait:<event>#1``, counted in the
order the run reaches them). Stored steps are matched by name alone: see the guide's "Versioning".
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connections

from awa_django.conf import SECONDS_MAX, SECONDS_RULE, awa_settings
from awa_django.exceptions import (
    DuplicateStepError,
    StepError,
    StepKindMismatchError,
    UnstorableStepResultError,
    WaitTimeout,
)
from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.storable import to_json
from awa_django.validation import UnstorableValueError

STEP, SLEEP, WAIT = "step", "sleep", "wait"  # awa_job_step.kind (models.StepKind)


class Parked(BaseException):
    """Ends the attempt at once: the job parks (a sleep, or a wait with no event yet), with the
    outcome ``JobContext.parked``. A ``BaseException``, so a handler's ``except Exception`` does not
    swallow it; should a handler swallow it anyway, the attempt still parks when it returns."""


class Park(NamedTuple):
    """How an attempt parks: the job's next state (scheduled or waiting), seconds until its run_at
    (None keeps it), and whether it waits for an event (the writer then looks for one that came
    meanwhile). Its attempt is given back (``JobContext.parked``, the ``Outcome``)."""

    state: JobState
    delay: float | None
    waits_event: bool


class StoredStep(NamedTuple):
    kind: str
    result: Any
    finished_at: datetime | None
    wake_at: datetime | None
    timed_out: bool
    event: str | None


def _loads(value: Any) -> Any:
    """A jsonb column as read through Django's cursor (which leaves jsonb as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


class Steps:
    """One attempt's view of its job's steps: read once, at the first step, sleep or wait."""

    __slots__ = ("_clock", "_counts", "_stored", "_used", "alias", "attempt", "depth", "floor", "job_id", "parked")

    def __init__(
        self,
        job_id: int,
        attempt: int,
        alias: str | None = None,
        floor: datetime | None = None,
        depth: int | None = None,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.alias = alias or awa_settings().DATABASE_ALIAS
        # The clock reads at least this (run_jobs(now=...): a test's time moved on): sleeps and
        # deadlines are decided and recorded by it; the park's delay stays relative to the
        # database's clock, which the writer adds it to.
        self.floor = floor
        # The transaction.atomic() blocks open on the connection when the handler was called (None:
        # unknown): a park reached inside more is refused (_park).
        self.depth = depth
        self._stored: dict[str, StoredStep] | None = None
        # The database's clock, monotonic() then, and now() then (in a transaction: its start).
        self._clock: tuple[datetime, float, datetime] | None = None
        self._used: set[str] = set()  # names used in this run
        self._counts: dict[str, int] = {}  # default names given, by prefix
        self.parked: Park | None = None  # set when a sleep or wait parked this attempt

    # --- reading ----------------------------------------------------------------------------

    def _load(self) -> dict[str, StoredStep]:
        if self._stored is None:
            stored: dict[str, StoredStep] = {}
            with connections[self.alias].cursor() as cursor:
                cursor.execute(statements["read_job_steps"], {"job": self.job_id})
                rows = cursor.fetchall()
            for name, kind, result, finished_at, wake_at, timed_out, event, now, since in rows:
                if name is not None:
                    stored[name] = StoredStep(kind, _loads(result), finished_at, wake_at, bool(timed_out), event)
                self._clock = (now, time.monotonic(), since)
            self._stored = stored
        return self._stored

    def _database_now(self) -> datetime:
        self._load()
        assert self._clock is not None
        read, at, _ = self._clock
        return read + timedelta(seconds=time.monotonic() - at)

    def now(self) -> datetime:
        """The database's clock, as read with the steps and advanced by this process's since (or
        the floor, when that is later)."""
        now = self._database_now()
        return now if self.floor is None or self.floor <= now else self.floor

    def _use(self, name: str, kind: str) -> StoredStep | None:
        """Claim ``name`` for this run; the stored step of that name, if any."""
        if self.parked is not None:  # the handler swallowed Parked and went on: park again
            raise Parked
        if not isinstance(name, str) or not name:
            raise StepError(self.job_id, str(name), "a step name must be a non-empty string")
        if name in self._used:
            raise DuplicateStepError(self.job_id, name)
        stored = self._load().get(name)
        if stored is not None and stored.kind != kind:
            raise StepKindMismatchError(self.job_id, name, stored.kind, kind)
        self._used.add(name)
        return stored

    def default_name(self, prefix: str) -> str:
        n = self._counts[prefix] = self._counts.get(prefix, 0) + 1
        return f"{prefix}#{n}"

    def _insert(self, name: str, kind: str, **values: Any) -> tuple[bool, datetime | None]:
        """Write the step's record: (whether it was written, its wake time). A wake time or a
        deadline is counted from the database's clock, or from the floor when that is later."""
        params: dict[str, Any] = {"job": self.job_id, "name": name, "kind": kind, "attempt": self.attempt}
        params.update({"result": None, "ran": None, "delay": None, "event": None, "floor": self.floor}, **values)
        with connections[self.alias].cursor() as cursor:
            cursor.execute(statements["insert_job_step"], params)
            row = cursor.fetchone()
        return (False, None) if row is None else (True, row[0])

    def _reread(self, name: str) -> StoredStep:
        """The step another attempt of the job stored first (our insert found it there)."""
        self._stored = None
        stored = self._load().get(name)
        if stored is None:  # the insert conflicted with a row it cannot now see: a bug, say so
            raise StepError(self.job_id, name, "its record was there when written, and gone when read back")
        return stored

    # --- steps ------------------------------------------------------------------------------

    def begin(self, name: str) -> tuple[bool, Any]:
        """(True, stored result) for a step done in an earlier attempt; (False, None) to run it."""
        read_now = self._stored is None  # this call reads the steps: nothing to read again
        stored = self._use(name, STEP)
        if stored is None and not read_now and self.attempt > 1:
            # A retry may overlap the attempt it replaced (rescued for a stale heartbeat or a passed
            # deadline, its thread still running): that one may have recorded this step since our
            # read. Read again before running it, or a step that completed would run twice. A first
            # attempt has no earlier one, and pays nothing for this.
            self._stored = None
            stored = self._load().get(name)
            if stored is not None and stored.kind != STEP:
                raise StepKindMismatchError(self.job_id, name, stored.kind, STEP)
        return (True, stored.result) if stored is not None else (False, None)

    def abandon(self, name: str) -> None:
        """The step's function raised: nothing was stored, and the name may be used again."""
        self._used.discard(name)

    def record(self, name: str, result: Any, ran: float) -> Any:
        """Store the step's result; what every later attempt gets (a JSON round trip of it)."""
        try:
            text = to_json(result, f"the result of step {name!r}")
        except UnstorableValueError as exc:
            raise UnstorableStepResultError(self.job_id, name, str(exc)) from None
        if not self._insert(name, STEP, result=text, ran=ran)[0]:
            return self._reread(name).result
        value = json.loads(text)
        assert self._stored is not None
        self._stored[name] = StoredStep(STEP, value, None, None, False, None)
        return value

    # --- sleeps -----------------------------------------------------------------------------

    def sleep(self, seconds: float, name: str | None) -> Park | None:
        """None when the sleep is over; else the parking outcome (the caller raises Parked)."""
        name = name or self.default_name(SLEEP)
        if not math.isfinite(seconds) or abs(seconds) > SECONDS_MAX:
            raise StepError(self.job_id, name, f"sleep({seconds!r}): give a finite number of seconds, {SECONDS_RULE}")
        stored = self._use(name, SLEEP)
        if stored is None:
            written, wake = self._insert(name, SLEEP, delay=seconds)
            if not written:
                wake = self._reread(name).wake_at
            elif seconds <= 0:
                return None
        else:
            wake = stored.wake_at
        assert wake is not None
        if wake <= self.now():
            return None
        return self._park(name, JobState.SCHEDULED, wake, waits_event=False)

    def seconds_until(self, when: datetime) -> float:
        if when.tzinfo is None:
            raise StepError(
                self.job_id, "sleep_until", f"sleep_until({when!r}) needs an aware datetime (with a time zone)"
            )
        return (when - self.now()).total_seconds()

    # --- waits ------------------------------------------------------------------------------

    def wait_for(self, event: str, timeout: float | None, name: str | None) -> tuple[Park | None, Any]:
        """(None, payload) when an event came; (parking outcome, None) to park.
        ``WaitTimeout`` at the deadline with none."""
        if not isinstance(event, str) or not event:
            raise StepError(self.job_id, str(name), f"wait_for({event!r}): the event must be a non-empty string")
        name = name or self.default_name(f"{WAIT}:{event}")
        stored = self._use(name, WAIT)
        if stored is not None:
            if stored.event != event:
                raise StepError(
                    self.job_id,
                    name,
                    f"stored as a wait for {stored.event!r}, used now for {event!r} (the code changed while the "
                    "job was parked); give the new wait a new name",
                )
            if stored.finished_at is not None:
                if stored.timed_out:
                    raise WaitTimeout(self.job_id, name, event)
                return None, stored.result
        params: dict[str, Any] = {"job": self.job_id, "name": name, "event": event, "attempt": self.attempt}
        with connections[self.alias].cursor() as cursor:
            cursor.execute(statements["take_job_event"], params)
            taken = cursor.fetchone()
        if taken is not None:
            payload = _loads(taken[0])
            self._load()[name] = StoredStep(WAIT, payload, self.now(), None, False, event)
            return None, payload
        deadline: datetime | None
        if stored is None:
            if timeout is not None and not 0 < timeout <= SECONDS_MAX:  # NaN fails both
                raise StepError(
                    self.job_id,
                    name,
                    f"wait_for timeout={timeout!r}: give a positive number of seconds, {SECONDS_RULE}",
                )
            written, deadline = self._insert(name, WAIT, delay=timeout, event=event)
            if not written:
                return self._again(event, timeout, name)
        elif stored.wake_at is None:
            deadline = None
        else:
            deadline = stored.wake_at
            if deadline <= self.now():
                with connections[self.alias].cursor() as cursor:
                    cursor.execute(statements["end_job_wait"], {"job": self.job_id, "name": name})
                    ended = cursor.fetchone() is not None
                if not ended:  # an event was taken meanwhile by another attempt: read it
                    return self._again(event, timeout, name)
                raise WaitTimeout(self.job_id, name, event)
        if deadline is None:
            return self._park(name, JobState.WAITING, None, waits_event=True), None
        return self._park(name, JobState.SCHEDULED, deadline, waits_event=True), None

    def _again(self, event: str, timeout: float | None, name: str) -> tuple[Park | None, Any]:
        """The wait's record changed under us (another attempt of the job): read it and decide again."""
        self._stored = None
        self._used.discard(name)
        return self.wait_for(event, timeout, name)

    def _writer_now(self) -> datetime:
        """The now() the park's delay will be added to: inside a transaction (an atomic handler's,
        run_jobs' test transaction) the writer writes in it, and now() is its start; elsewhere the
        worker's writer writes a moment later (the job then wakes that moment late, never early)."""
        if connections[self.alias].in_atomic_block:
            self._load()
            assert self._clock is not None
            return self._clock[2]
        return self._database_now()

    def _park(self, name: str, state: JobState, wake: datetime | None, *, waits_event: bool) -> Park:
        """Park until ``wake`` (None: until a signal): the writer sets run_at = its now() + delay.

        Refused (``StepError``, the job fails: every attempt would do the same) inside a
        ``transaction.atomic()`` block of the handler's own: the park ends the attempt by raising
        through that block, which rolls back on any exception, and the sleep's or wait's record with
        it, while the park itself is written. The job would then sleep again at every resume, or
        wait where no signal finds it, and never go on."""
        if self.depth is not None and len(connections[self.alias].atomic_blocks) > self.depth:
            kind = "sleep" if not waits_event else "wait_for"
            raise StepError(
                self.job_id,
                name,
                f"{kind} inside a transaction.atomic() block of the handler's own: parking ends the attempt with an "
                "exception, which rolls that block back, and this park's record with it (the job would never go "
                f"on). Call {kind} outside the block; in an atomic=True handler the writes before it commit with "
                "the park anyway",
            )
        delay = None if wake is None else (wake - self._writer_now()).total_seconds()
        self.parked = park = Park(state, delay, waits_event)
        return park
