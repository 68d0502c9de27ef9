"""What a running job carries: the claimed row, the handler's context, and its outcome."""

from __future__ import annotations

import asyncio
import inspect
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Protocol

from psycopg.pq.abc import PGresult

from awa_django.durable import Parked, Steps
from awa_django.states import JobState
from awa_django.storable import to_json


@dataclass(slots=True)
class ClaimedJob:
    """A row returned by claim_jobs: one attempt, identified by (id, run_lease)."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    run_lease: int
    priority: int
    metadata: dict[str, Any]
    run_at: datetime | None = None  # the claim's lane cursor moves to (run_at, id)
    # Seconds from due (run_at) to this claim, by the database clock; None where not measured.
    waited: float | None = None
    # The kind's @job(timeout=) stored on the row, in seconds: the attempt's deadline instead of the queue's.
    timeout: float | None = None
    fair_key: str = ""  # the row's fair key ('' is the default key)
    workflow_id: int | None = None  # the workflow the job is a step of (its log lines name it)


class _WithResult(Protocol):
    @property
    def pgresult(self) -> PGresult | None: ...


def column_names(cursor: _WithResult) -> list[str]:
    """The names of the current result's columns. Read from the result itself: a row factory runs
    once per claim, and ``cursor.description`` builds a ``Column`` object per column each time it
    is read (about ten times the cost, for names only)."""
    result = cursor.pgresult
    if result is None:
        return []
    return [(result.fname(i) or b"").decode() for i in range(result.nfields)]


def claimed_job_row(cursor: _WithResult) -> Callable[[Sequence[Any]], ClaimedJob]:
    """A psycopg row factory for claim_jobs: each row decoded into a ``ClaimedJob`` by column name.

    Like ``psycopg.rows.class_row(ClaimedJob)``, but the columns are matched to the fields once
    per result, not once per row: a claim returns up to hundreds of rows on the hot path. A field
    the statement does not return is an error naming it, here, not a shifted value later."""
    return _claimed_job_maker(column_names(cursor))


def _claimed_job_maker(names: list[str]) -> Callable[[Sequence[Any]], ClaimedJob]:
    missing = [name for name in _CLAIMED_FIELDS if name not in names]
    if missing:
        raise LookupError(f"the claim statement returns no column {', '.join(missing)} for ClaimedJob")
    pick = operator.itemgetter(*(names.index(name) for name in _CLAIMED_FIELDS))

    def make(values: Sequence[Any]) -> ClaimedJob:
        return ClaimedJob(*pick(values))

    return make


_CLAIMED_FIELDS = tuple(field.name for field in fields(ClaimedJob))


class ClaimRows:
    """A claim's row factory (as ``claimed_job_row``) that also keeps its ``more`` column:
    claim_jobs says there whether a due job was left past the last one it claimed in each lane.
    ``more`` is None until a row with that column was read (no row, or a statement without it:
    claim_keyed_jobs), so only a claim that returned rows can say the queue ran dry."""

    __slots__ = ("more",)

    def __init__(self) -> None:
        self.more: bool | None = None

    def __call__(self, cursor: _WithResult) -> Callable[[Sequence[Any]], ClaimedJob]:
        names = column_names(cursor)
        make = _claimed_job_maker(names)
        if "more" not in names:
            return make
        at = names.index("more")

        def make_noting(values: Sequence[Any]) -> ClaimedJob:
            self.more = values[at]
            return make(values)

        return make_noting


class JobContext:
    """Given to handlers registered with ``takes_context=True``.

    ``cancelled`` becomes true when the job was cancelled or rescued away from this worker (or
    the worker is stopping): a long handler should check it and return early. ``set_progress``
    stores a JSON value that is written with the next heartbeat and with the final state.
    Safe to use from async handlers and from sync handlers in worker threads.
    """

    __slots__ = (
        "_cancel",
        "_progress",
        "_progress_json",
        "_steps",
        "_upstreams",
        "atomic_depth",
        "clock_floor",
        "finishing",
        "job",
        "running_thread",
    )

    def __init__(self, job: ClaimedJob) -> None:
        self.job = job
        # A plain flag: set on the loop's thread, read by a sync handler's thread (one attribute
        # store and load, atomic in CPython). A threading.Event per job built a Condition and a
        # lock for every attempt, 7 % of the worker's per-job Python, to be set for almost none.
        self._cancel = False
        self._progress: Any = None
        self._progress_json: str | None = None  # as it was when set: later mutation does not leak in
        # Set once the handler returned and its final state is on its way to the database: the
        # heartbeat leaves the attempt alone from then on.
        self.finishing = False
        # A sync handler's thread still running past the deadline (the attempt has ended): the
        # worker keeps the attempt's slot until this future is done.
        self.running_thread: asyncio.Future[Any] | None = None
        self._upstreams: list[Any] | None = None  # a workflow step's upstream results, read once
        self._steps: Steps | None = None  # a durable job's steps, read at its first step
        # run_jobs(now=...) sets it: durable sleeps and waits read the clock as at least this.
        self.clock_floor: datetime | None = None
        # How many transaction.atomic() blocks were open on the jobs' connection when the runner
        # called a def handler (None: not known, an async handler): a sleep or wait reached inside
        # more is inside a block of the handler's own, which its park would roll back (durable.py).
        self.atomic_depth: int | None = None

    def upstreams(self, name: str | None = None) -> list[Any]:
        """This workflow step's upstream jobs (``UpstreamResult``: name, job_id, state, result),
        all of them or those named ``name``; read from the database on first use (a ``def``
        handler; ``async def`` handlers await ``aupstreams``)."""
        if self._upstreams is None:
            from awa_django.workflows.results import read_upstreams  # Django, only for workflow steps

            self._upstreams = read_upstreams(self.job.id)
        return [u for u in self._upstreams if name is None or u.name == name]

    def upstream(self, name: str) -> Any:
        """The result of this step's one upstream named ``name`` (the upstream step's name);
        ``UpstreamError`` if there is none, several, or it did not complete."""
        from awa_django.workflows.results import pick

        return pick(self.job.id, self.upstreams(), name)

    async def aupstreams(self, name: str | None = None) -> list[Any]:
        """``upstreams`` for ``async def`` handlers."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.upstreams)(name)

    async def aupstream(self, name: str) -> Any:
        """``upstream`` for ``async def`` handlers."""
        from awa_django.workflows.results import pick

        return pick(self.job.id, await self.aupstreams(), name)

    # --- durable jobs (awa_django.durable, docs/guide/durable-jobs.md) ----------------

    def _durable(self, sync: bool) -> Steps:
        if sync:
            _refuse_on_loop()
        if self._steps is None:
            self._steps = Steps(self.job.id, self.job.attempt, floor=self.clock_floor, depth=self.atomic_depth)
        return self._steps

    @property
    def parked(self) -> Outcome | None:
        """The outcome of a sleep or wait that parked this attempt (None: it did not park): its
        next state, its attempt given back."""
        park = None if self._steps is None else self._steps.parked
        if park is None:
            return None
        return Outcome(park.state, delay=park.delay, refund=1, waits_event=park.waits_event, parked=True)

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job, whatever its attempts: the first time, run
        it and store its JSON result before returning it; at every later attempt, return the stored
        result without running it. ``name`` is unique within the job (``DuplicateStepError``
        otherwise). A result Postgres cannot store fails the job (``UnstorableStepResultError``,
        naming the step and the value). ``def`` handlers; ``async def`` ones await ``astep``."""
        steps = self._durable(sync=True)
        done, result = steps.begin(name)
        if done:
            return result
        started = time.monotonic()
        try:
            value = fn(*args, **kwargs)
        except BaseException:
            steps.abandon(name)
            raise
        return steps.record(name, value, time.monotonic() - started)

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``step`` for ``async def`` handlers: ``fn`` may be a coroutine function (awaited) or a
        plain one (called on the loop: keep it short, or make it async)."""
        from asgiref.sync import sync_to_async

        steps = self._durable(sync=False)
        done, result = await sync_to_async(steps.begin)(name)
        if done:
            return result
        started = time.monotonic()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except BaseException:
            steps.abandon(name)
            raise
        return await sync_to_async(steps.record)(name, value, time.monotonic() - started)

    def sleep(self, seconds: float, *, name: str | None = None) -> None:
        """A durable sleep: the attempt ends at once (its slot and fair-key share are freed, its
        attempt is not spent) and the job runs again from the top after ``seconds``, when this
        sleep returns at once. Recorded as a step (named ``sleep#1``, ``sleep#2``… in the order
        the run reaches them, unless ``name`` is given)."""
        steps = self._durable(sync=True)
        if steps.sleep(float(seconds), name) is not None:
            raise Parked

    async def asleep(self, seconds: float, *, name: str | None = None) -> None:
        """``sleep`` for ``async def`` handlers."""
        from asgiref.sync import sync_to_async

        steps = self._durable(sync=False)
        if await sync_to_async(steps.sleep)(float(seconds), name) is not None:
            raise Parked

    def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """``sleep`` until ``when`` (an aware datetime), by the database's clock."""
        steps = self._durable(sync=True)
        self.sleep(steps.seconds_until(when), name=name)

    async def asleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """``sleep_until`` for ``async def`` handlers."""
        from asgiref.sync import sync_to_async

        steps = self._durable(sync=False)
        await self.asleep(await sync_to_async(steps.seconds_until)(when), name=name)

    def wait_for(self, event: str, *, timeout: float | None = None, name: str | None = None) -> Any:
        """The payload of the event ``event`` sent to this job (``Job.objects.signal``), recorded as
        a step (named ``wait:<event>#1``… unless ``name`` is given). With none sent yet, the
        attempt ends at once and the job parks, holding no slot, until one is sent, or until
        ``timeout`` seconds from the first time the wait was reached: then ``WaitTimeout`` is
        raised (here, and at every later attempt), for the handler to catch."""
        steps = self._durable(sync=True)
        parked, payload = steps.wait_for(event, None if timeout is None else float(timeout), name)
        if parked is not None:
            raise Parked
        return payload

    async def await_for(
        self,
        event: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a durable deadline in the database, not asyncio's
        name: str | None = None,
    ) -> Any:
        """``wait_for`` for ``async def`` handlers."""
        from asgiref.sync import sync_to_async

        steps = self._durable(sync=False)
        parked, payload = await sync_to_async(steps.wait_for)(event, None if timeout is None else float(timeout), name)
        if parked is not None:
            raise Parked
        return payload

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def kind(self) -> str:
        return self.job.kind

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def max_attempts(self) -> int:
        return self.job.max_attempts

    @property
    def run_lease(self) -> int:
        return self.job.run_lease

    @property
    def metadata(self) -> dict[str, Any]:
        return self.job.metadata

    @property
    def cancelled(self) -> bool:
        return self._cancel

    def cancel(self) -> None:
        """Ask the handler to stop (the worker calls this; handlers read ``cancelled``)."""
        self._cancel = True

    def set_progress(self, value: Any) -> None:
        """Record progress (any JSON value); written with the next heartbeat.

        Raises ``UnstorableValueError`` (a ``ValueError``) here and now, in the handler, for a value
        Postgres could not store (not JSON, NaN, a NUL character or an unpaired surrogate in a
        string), naming where it is; the progress stored before stays.
        """
        text = to_json(value, "the progress value")
        self._progress, self._progress_json = value, text

    @property
    def progress(self) -> Any:
        return self._progress

    @property
    def progress_json(self) -> str | None:
        """The last progress as JSON text (checked storable), or None if none was set."""
        return self._progress_json


def _refuse_on_loop() -> None:
    """A ``def`` handler's durable calls read and write the database: not on an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "context.step, sleep, sleep_until and wait_for are for def handlers; an async def handler awaits "
        "astep, asleep, asleep_until and await_for"
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished attempt's next state (one of ``awa_django.states.OUTCOME_STATES``), as
    ``awa_django.worker.writes`` turns it into complete_jobs or finalize_jobs parameters."""

    state: JobState
    delay: float | None = None  # seconds until run_at; None keeps run_at
    error: dict[str, Any] | None = None  # an entry appended to the job's errors
    refund: int = 0  # 1 gives the attempt back (snooze)
    result: str | None = None  # the handler's return value as JSON text, when it returned one
    # Who writes it. None: the writer (the worker's batch writer, or in-process execution). True:
    # written already, in an atomic handler's own transaction (``awa_django.worker.atomic``). False:
    # refused there by the (id, running, run_lease) guard, and rolled back with the handler's writes.
    settled: bool | None = None
    # A durable job parked in a wait (``awa_django.durable``): once written, the writer wakes
    # it at once if its event came meanwhile (wake_signalled_jobs, in the same transaction).
    waits_event: bool = False
    parked: bool = False  # a durable job's sleep or wait ended the attempt (the outcome label "parked")

    @property
    def bare(self) -> bool:
        """Completed with nothing more to store (no result, error, delay or refund)."""
        return (
            self.state is _COMPLETED_STATE
            and self.result is None
            and self.error is None
            and self.delay is None
            and not self.refund
        )


# Read once: an enum member looked up on its class costs about a microsecond on Python 3.11, and
# ``bare`` runs once per finished job.
_COMPLETED_STATE = JobState.COMPLETED

# What a handler that returned None ends in; any equal Outcome is written the same way.
COMPLETED = Outcome(_COMPLETED_STATE)

ATOMIC_ENTRY_KEY = "atomic"
"""The key an atomic attempt's error entry carries (True): the attempt ran in a transaction, and
its writes were rolled back. The worker writes it (``awa_django.worker.atomic``), the job page
shows it."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """One attempt this worker runs: the claimed row, its handler's context, and the task running
    it (which ends once the row's final state is written or handed back)."""

    job: ClaimedJob
    context: JobContext
    task: asyncio.Task[None]
