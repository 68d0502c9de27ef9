"""The enqueue API: ``Job.objects.enqueue`` / ``aenqueue`` / ``enqueue_many``.

Every path validates its input completely before anything is written, and writes on Django's
own connection, so a job joins the caller's transaction: commit and it exists, roll back and it
never did. Available jobs wake idle workers through a NOTIFY, sent by a row trigger (by
``enqueue_many`` itself for its COPY), which Postgres delivers at commit, once per queue per
transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple, Self, TypeVar

from asgiref.sync import sync_to_async
from django.db import IntegrityError, OperationalError, connections, models, transaction
from django.db.models.functions import Now
from django.utils import timezone

from awa_django.arguments import ArgsCheck
from awa_django.conf import awa_settings
from awa_django.dbparams import execute_prepared
from awa_django.deadlocks import unique_deadlock
from awa_django.defaults import (
    FAIR_KEY_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_DEFAULT,
)
from awa_django.exceptions import InvalidJobError, UniqueJobConflictError
from awa_django.handlers import registry
from awa_django.jobspec import (
    ACTIVE_STATES,
    ALL_STATES,
    KIND_DEFAULTED,
    CopyLines,
    FairKeyRule,
    UniqueOptions,
    build_row,
    check_fair_key,
    check_int,
    check_json_object,
    check_name,
    copy_text,
    derive_fair_key,
)
from awa_django.notices import notices
from awa_django.observability import tracing
from awa_django.sql import JOBS_CHANNEL, statements
from awa_django.states import JobState
from awa_django.validation import UnstorableValueError, brief, storable_json, to_json

if TYPE_CHECKING:
    from awa_django.services.signals import SignalSent

_Job = TypeVar("_Job", bound=models.Model)
"""The model these are the queryset and manager of (``awa_django.models.Job``, which attaches them):
a type parameter, so that this module, which the models import, does not import the models."""

UNIQUE_CONSTRAINT = "awa_job_unique_key_uniq"
COPY_BATCH_SIZE = 10_000

__all__ = [
    "ACTIVE_STATES",
    "ALL_STATES",
    "COPY_BATCH_SIZE",
    "UNIQUE_CONSTRAINT",
    "JobManager",
    "JobQuerySet",
    "KindDefaults",
    "UniqueOptions",
    "build_row",
    "kind_defaults",
]


class KindDefaults(NamedTuple):
    """What an enqueue that leaves queue, priority or max_attempts out gets for a kind, and the
    kind's own rules: its handler's argument check, its timeout (stored on the row) and how it
    derives a fairness key from the args when the enqueue names none (``fair_key_for``)."""

    queue: str
    priority: int
    max_attempts: int
    args_check: ArgsCheck | None = None
    timeout: timedelta | None = None
    fair_key: FairKeyRule | None = None

    def fair_key_for(self, kind: str, fair_key: object, args: dict[str, Any], index: int | None = None) -> str:
        """The job's key: ``fair_key`` when the enqueue names one (None: it does not), else the
        kind's ``@job(fair_key=)`` rule applied to ``args``, else the default key ``""``."""
        if fair_key is not None:
            return check_fair_key(fair_key, index)
        return derive_fair_key(kind, self.fair_key, args, index)


_PLAIN_DEFAULTS = KindDefaults(QUEUE_DEFAULT, PRIORITY_DEFAULT, MAX_ATTEMPTS_DEFAULT)
_UNSEEN = object()  # no spec has been seen yet (None is a spec's value: "the default")


def kind_defaults(kind: object) -> KindDefaults:
    """The ``@job`` options of ``kind`` when it is registered, else the package defaults.

    Only ``@job`` handlers count (a dict lookup); the values were validated when it registered.
    """
    handler = registry.registered(kind) if isinstance(kind, str) else None
    if handler is None:
        return _PLAIN_DEFAULTS
    timeout = None if handler.timeout is None else timedelta(seconds=handler.timeout)
    return KindDefaults(
        handler.queue, handler.priority, handler.max_attempts, handler.args_check, timeout, handler.fair_key
    )


_FAST_KEYS = frozenset({"kind", "args", "queue", "priority", "max_attempts", "fair_key"})
_SPEC_KEYS = frozenset(
    {"kind", "args", "queue", "priority", "run_at", "max_attempts", "metadata", "tags", "unique", "fair_key"}
)


def _copy_interval(timeout: timedelta | None) -> str | None:
    """A timeout as a COPY text-format interval (seconds), or None for NULL."""
    return None if timeout is None else repr(timeout.total_seconds())


class _Bulk:
    """The COPY lines of one ``enqueue_many`` call, one spec at a time, validated as ``enqueue`` does.

    The common spec (a dict of kind, args and maybe queue, priority, max_attempts) takes a short
    path with the same rules: a name already checked in this call is not checked again, a run of
    one kind looks its defaults up once, and the line is its args' JSON between a head and a tail
    that ``CopyLines`` wrote once per (kind, queue, priority, max_attempts). Any other spec goes
    through ``build_row``, like ``enqueue``.
    """

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.trace = tracing.current_trace()  # None unless OpenTelemetry has a current span
        self.copy = CopyLines(now, "{}" if self.trace is None else to_json(self.trace))
        self.lines: list[str] = []  # in copy_jobs' column order
        self.unique_keys: dict[str, tuple[str, list[str]]] = {}  # key: (state, unique_states)
        self.kinds: dict[str, KindDefaults] = {}  # each kind's defaults, looked up once per call
        self.queues: set[str] = set()
        self.available_queues: set[str] = set()  # the queues end_copy_jobs NOTIFYs
        self._frames: dict[tuple[str, str, int, int], tuple[str, str]] = {}  # a plain line around its args
        self._indexed: set[str] = set()  # unique keys of this call that the partial unique index covers
        self.keyed: list[tuple[str, int]] = []  # (unique key, line) of each row the unique index takes
        self._kinds_ok: set[str] = set()
        self._last_kind: object = _UNSEEN  # the previous short-path spec's kind and queue
        self._last_queue: object = _UNSEEN
        self._defaults = _PLAIN_DEFAULTS  # the last kind's defaults

    def add(self, index: int, spec: object) -> None:
        """Validate ``spec`` (the ``index``-th) and add its line; InvalidJobError naming the index."""
        if type(spec) is dict and spec.keys() <= _FAST_KEYS and "kind" in spec:
            self._add_plain(index, spec)
        else:
            self._add_spec(index, spec)

    def _add_plain(self, index: int, spec: dict[str, Any]) -> None:
        kind = spec["kind"]
        if kind is not self._last_kind:  # a bulk call is mostly one kind: look it up once per run
            if type(kind) is not str or kind not in self._kinds_ok:
                kind = check_name("kind", kind, index)
                self._kinds_ok.add(kind)
            self._defaults = self._kind_defaults(kind)
            self._last_kind = kind
        d_queue, d_priority, d_max_attempts, args_check, timeout, key_rule = self._defaults
        queue = spec.get("queue", d_queue)
        if queue is not self._last_queue:
            if queue is None:
                queue = d_queue
            if type(queue) is not str or queue not in self.queues:
                queue = check_name("queue", queue, index)
                self.queues.add(queue)
            self.available_queues.add(queue)
            self._last_queue = queue
        args = spec.get("args")
        if type(args) is dict:  # check_json_object's rule, without its Mapping check and copy
            try:
                args_json = storable_json(args) if args else "{}"
            except UnstorableValueError as exc:
                raise InvalidJobError("args", args, exc.reason, index=index) from None
        else:
            args, args_json = check_json_object("args", args, index)
        if args_check is not None and (problem := args_check.problem(args)) is not None:
            raise args_check.error(kind, args, problem, index)
        fair_key = spec.get("fair_key")
        if fair_key is not None or key_rule is not None:
            fair_key = self._defaults.fair_key_for(kind, fair_key, args, index)
        # The kind's defaults were validated when it registered; anything else is checked.
        priority = spec.get("priority", d_priority)
        if priority is not d_priority:
            priority = (
                d_priority if priority is None else check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX, index)
            )
        max_attempts = spec.get("max_attempts", d_max_attempts)
        if max_attempts is not d_max_attempts:
            max_attempts = (
                d_max_attempts
                if max_attempts is None
                else check_int("max_attempts", max_attempts, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX, index)
            )
        if timeout is not None:  # the kind's timeout is in the line: no shared frame
            line = self.copy.line(
                kind,
                queue,
                args_json,
                JobState.AVAILABLE,
                priority,
                max_attempts,
                timeout=_copy_interval(timeout),
                fair_key=fair_key or FAIR_KEY_DEFAULT,
            )
            self.lines.append(line)
            return
        frame = self._frames.get((kind, queue, priority, max_attempts))
        if frame is None:
            frame = self._frame(kind, queue, priority, max_attempts)
        # copy_json, inlined: JSON text needs only its backslashes doubled for COPY.
        body = frame[0] + (args_json.replace("\\", "\\\\") if "\\" in args_json else args_json)
        if fair_key:  # the frame's tail ends with the default key's empty field and the newline
            self.lines.append(body + frame[1][:-1] + copy_text(fair_key) + "\n")
        else:
            self.lines.append(body + frame[1])

    def _frame(self, kind: str, queue: str, priority: int, max_attempts: int) -> tuple[str, str]:
        """A plain job's COPY line before and after its args: CopyLines' line around a NUL, which no
        args JSON text holds (storable_json refuses it) and COPY escaping leaves as it is."""
        head, tail = self.copy.line(kind, queue, "\x00", JobState.AVAILABLE, priority, max_attempts).split("\x00")
        self._frames[(kind, queue, priority, max_attempts)] = (head, tail)
        return head, tail

    def _add_spec(self, index: int, spec: object) -> None:
        if not isinstance(spec, Mapping):
            raise InvalidJobError("spec", spec, "must be a dict of enqueue() arguments", index=index)
        unknown = set(spec) - _SPEC_KEYS
        if unknown:
            raise InvalidJobError(
                "spec",
                dict(spec),
                f"unknown key(s) {brief(sorted(unknown, key=brief))}; allowed: {sorted(_SPEC_KEYS)}",
                index=index,
            )
        if "kind" not in spec:
            raise InvalidJobError("kind", None, "is required", index=index)
        options = dict(spec)
        if self.trace is not None:
            options["metadata"] = tracing.with_traceparent(options.get("metadata"))
        defaults = self._kind_defaults(options["kind"]) if isinstance(options["kind"], str) else _PLAIN_DEFAULTS
        for key in KIND_DEFAULTED:
            if options.get(key) is None:
                options[key] = getattr(defaults, key)
        fair_key = options.pop("fair_key", None)
        row = build_row(**options, now=self.now, index=index)
        if defaults.args_check is not None:
            defaults.args_check.check(row.kind, row.args, index)
        row = row._replace(fair_key=defaults.fair_key_for(row.kind, fair_key, row.args, index))
        self.queues.add(row.queue)
        state = JobState.SCHEDULED if (row.run_at or self.now) > self.now else JobState.AVAILABLE
        if state == JobState.AVAILABLE:
            self.available_queues.add(row.queue)
        if row.unique_key is not None:
            assert row.unique_states is not None
            if state in row.unique_states:
                if row.unique_key in self._indexed:
                    raise UniqueJobConflictError(row.kind, [], row.unique_key, spec_index=index)
                self._indexed.add(row.unique_key)
                self.keyed.append((row.unique_key, len(self.lines)))
            self.unique_keys[row.unique_key] = (state, row.unique_states)
        self.lines.append(self.copy.row_line(row, state, timeout=_copy_interval(defaults.timeout)))

    def key_order(self) -> list[int] | None:
        """The order to write the lines in so that the unique index takes this call's keys in key
        order, or None when the lines already come in it (always so with fewer than two such keys).

        Only the keyed rows move, among the positions keyed rows hold: the smallest key's row goes
        to the first of them, and so on. Two calls that take overlapping keys in one order never
        wait for each other in a cycle: whichever waits, waits at a key the other already holds,
        and holds every smaller key of its own (docs/guide/jobs.md, "Unique keys in concurrent
        transactions")."""
        keys = [key for key, _ in self.keyed]
        if all(a < b for a, b in pairwise(keys)):
            return None
        order = list(range(len(self.lines)))
        for (_, slot), (_, line) in zip(self.keyed, sorted(self.keyed), strict=True):
            order[slot] = line
        return order

    def _kind_defaults(self, kind: str) -> KindDefaults:
        defaults = self.kinds.get(kind)
        if defaults is None:
            defaults = self.kinds[kind] = kind_defaults(kind)
        return defaults


class JobQuerySet(models.QuerySet[_Job]):
    """Query helpers named after the job states."""

    def waiting(self) -> Self:
        return self.filter(state=JobState.WAITING)

    def scheduled(self) -> Self:
        return self.filter(state=JobState.SCHEDULED)

    def available(self) -> Self:
        return self.filter(state=JobState.AVAILABLE)

    def running(self) -> Self:
        return self.filter(state=JobState.RUNNING)

    def completed(self) -> Self:
        return self.filter(state=JobState.COMPLETED)

    def retryable(self) -> Self:
        return self.filter(state=JobState.RETRYABLE)

    def failed(self) -> Self:
        return self.filter(state=JobState.FAILED)

    def cancelled(self) -> Self:
        return self.filter(state=JobState.CANCELLED)

    def finished(self) -> Self:
        return self.filter(state__in=[JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED])

    def stale(self, older_than: timedelta) -> Self:
        """Running jobs whose last heartbeat is older than ``older_than``."""
        return self.running().filter(heartbeat_at__lt=timezone.now() - older_than)

    # --- durable jobs parked in a sleep or a wait (awa_django.durable) ----------------------

    def _steps_in_force(self, kind: str, **where: Any) -> models.Exists:
        step = self.model._meta.apps.get_model("awa", "JobStep")  # models imports this module
        return models.Exists(step.objects.filter(job_id=models.OuterRef("pk"), kind=kind, **where))

    def sleeping(self) -> Self:
        """Durable jobs parked in a sleep: ``scheduled``, with a sleep whose wake time is to come."""
        return self.scheduled().filter(self._steps_in_force("sleep", wake_at__gt=Now()))

    def awaiting_event(self) -> Self:
        """Durable jobs parked in a wait: a wait in force (no ``finished_at``), ``waiting`` (no
        timeout) or ``scheduled`` (until its deadline). Not a workflow step waiting for its upstreams."""
        return self.filter(
            self._steps_in_force("wait", finished_at__isnull=True),
            state__in=[JobState.WAITING, JobState.SCHEDULED],
        )

    def parked(self) -> Self:
        """Durable jobs parked in a sleep or a wait: they hold no slot and are in no claim index."""
        return self.sleeping() | self.awaiting_event()


class JobManager(models.Manager[_Job]):
    """``Job.objects``: the enqueue API."""

    def _alias(self) -> str:
        return self.db if self._db else awa_settings().DATABASE_ALIAS

    def enqueue(
        self,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        unique: bool | Mapping[str, Any] | UniqueOptions | None = None,
        fair_key: str | None = None,
    ) -> _Job:
        """Insert one job in the caller's transaction and return it.

        ``queue``, ``priority`` and ``max_attempts`` left out (or None) are the kind's ``@job``
        options when it is registered, else ``"default"``, 2 and 25. A kind with no handler, or a
        queue no live worker serves, is logged once as a warning (see ``awa_django.notices``).
        When the kind's handler is registered here, ``args`` must fit its signature
        (``awa_django.arguments``); its ``timeout`` is stored on the row.

        ``fair_key`` is the job's fairness key (a str of at most 128 characters, ``""`` the default
        key): the queue's slots are shared fairly between the keys with due jobs. Left out (None),
        it is what the kind's ``@job(fair_key=)`` derives from ``args``, else ``""``.

        Raises InvalidJobError before writing anything if an argument is invalid, and
        UniqueJobConflictError (naming the existing job's id) if ``unique`` refuses it.
        """
        return self._enqueue(
            kind,
            args,
            queue=queue,
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            metadata=metadata,
            tags=tags,
            unique=unique,
            fair_key=fair_key,
        )

    def _enqueue(
        self,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        unique: bool | Mapping[str, Any] | UniqueOptions | None = None,
        fair_key: str | None = None,
        head_start: timedelta = timedelta(0),
    ) -> _Job:
        """``enqueue``, where a job with no ``run_at`` is due ``head_start`` (>= 0) before the
        database's now(): ahead of its lane's jobs enqueued up to that much earlier (the Tasks
        backend's priority inside a lane). The INSERT computes it, so the database's clock decides
        and the enqueue stays one statement."""
        defaults = kind_defaults(kind)
        row = build_row(
            kind,
            args,
            queue=defaults.queue if queue is None else queue,
            priority=defaults.priority if priority is None else priority,
            run_at=run_at,
            max_attempts=defaults.max_attempts if max_attempts is None else max_attempts,
            metadata=tracing.with_traceparent(metadata),
            tags=tags,
            unique=unique,
        )
        if defaults.args_check is not None:
            defaults.args_check.check(row.kind, row.args)
        key = defaults.fair_key_for(row.kind, fair_key, row.args)
        row = row._replace(fair_key=key)
        alias = self._alias()
        params: dict[str, Any] = {
            "kind": row.kind,
            "queue": row.queue,
            "args": row.args_json,
            "priority": row.priority,
            "max_attempts": row.max_attempts,
            "run_at": row.run_at,
            "metadata": row.metadata_json,
            "tags": row.tags,
            "unique_key": row.unique_key,
            "unique_states": row.unique_states,
            "timeout": defaults.timeout,
            "fair_key": key,
            "head_start": head_start,
        }
        try:
            inserted = execute_prepared(alias, statements["insert_job"], params)
        except OperationalError as exc:
            deadlock = unique_deadlock(exc, [] if row.unique_key is None else [row.unique_key], kind=row.kind)
            if deadlock is None:
                raise
            raise deadlock from exc.__cause__  # the cause stays psycopg's DeadlockDetected
        if inserted is None:
            assert row.unique_key is not None
            with connections[alias].cursor() as cursor:
                cursor.execute(statements["find_unique_jobs"], {"keys": [row.unique_key]})
                raise UniqueJobConflictError(row.kind, [r[0] for r in cursor.fetchall()], row.unique_key)
        job_id, state, run_at_db, created_at = inserted
        from awa_django.inline import after_enqueue  # not at import: loading the models loads no runner

        after_enqueue(alias, [job_id])  # AWA["EXECUTION"] = "immediate": run it once this commits
        notices.after_enqueue(alias, (row.kind,), (row.queue,))
        return self._inserted(
            alias,
            row.model_values(),
            id=job_id,
            state=state,
            run_at=run_at_db,
            created_at=created_at,
            timeout=defaults.timeout,
        )

    def _inserted(self, alias: str, values: dict[str, Any], **database: Any) -> _Job:
        """A row insert_job just wrote, as the model instance loaded from it: the spec's values,
        what the database decided (``database``: id, state, run_at, created_at) and the model's
        defaults for every other field, which are what a new row holds (insert_job writes them)."""
        values.update(database)
        fields = self.model._meta.concrete_fields  # from_db wants model order
        names = [field.attname for field in fields]
        row = [values[field.attname] if field.attname in values else field.get_default() for field in fields]
        return self.model.from_db(alias, names, row)

    async def aenqueue(
        self,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        unique: bool | Mapping[str, Any] | UniqueOptions | None = None,
        fair_key: str | None = None,
    ) -> _Job:
        """``enqueue`` for async code (runs on Django's connection in the sync thread)."""
        return await sync_to_async(self.enqueue)(
            kind,
            args,
            queue=queue,
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            metadata=tracing.with_traceparent(metadata),  # taken here, on the caller's context
            tags=tags,
            unique=unique,
            fair_key=fair_key,
        )

    def signal(self, job_id: int, event: str, payload: Any = None) -> SignalSent:
        """Send ``event`` (with a JSON ``payload``) to the durable job ``job_id``: kept until the
        job's ``context.wait_for(event)`` takes it, and waking the job now if it is parked in that
        wait. Joins the caller's transaction, as an enqueue does. ``SignalError`` if the job does
        not exist or has finished (docs/guide/durable-jobs.md)."""
        from awa_django.services.signals import send_signal

        return send_signal(self._alias(), job_id, event, payload)

    async def asignal(self, job_id: int, event: str, payload: Any = None) -> SignalSent:
        """``signal`` for async code (runs on Django's connection in the sync thread)."""
        return await sync_to_async(self.signal)(job_id, event, payload)

    def enqueue_many(self, specs: Iterable[Mapping[str, Any]]) -> int:
        """Insert many jobs with COPY, all or nothing, in the caller's transaction; return the count.

        Each spec is a dict with ``enqueue``'s parameter names and defaults (queue, priority and
        max_attempts from the kind's ``@job`` options; ``fair_key`` per spec, else the kind's derived
        key, else the default key). Every spec is validated first: one
        bad spec raises InvalidJobError (naming its index) before anything is written. A unique
        spec that collides with an existing job or with another spec in the call raises
        UniqueJobConflictError and nothing of the call is kept.

        The unique rows are written in the order of their keys, whatever the order of ``specs``,
        so two calls with overlapping unique keys never deadlock each other: the later one waits
        for the earlier to end, then conflicts (it committed) or goes on (it rolled back). Job ids
        still follow the order of ``specs``. A deadlock with another transaction's single enqueues
        raises UniqueJobDeadlockError.
        """
        now = timezone.now()
        bulk = _Bulk(now)
        for index, spec in enumerate(specs):
            bulk.add(index, spec)
        rows, keys = bulk.lines, bulk.unique_keys
        if not rows:
            return 0
        alias = self._alias()
        try:
            connection = connections[alias]
            with (
                transaction.atomic(using=alias),
                connection.cursor() as cursor,
                connection.wrap_database_errors,
            ):
                raw = cursor.cursor  # the psycopg cursor under Django's wrapper, for COPY
                # The insert trigger would NOTIFY once per row: between these two, it is off and
                # end_copy_jobs NOTIFYs each queue once (migration 0009).
                cursor.execute(statements["begin_copy_jobs"])
                order = bulk.key_order()
                if order is None:
                    for start in range(0, len(rows), COPY_BATCH_SIZE):
                        with raw.copy(statements["copy_jobs"]) as copy:
                            copy.write("".join(rows[start : start + COPY_BATCH_SIZE]))
                else:  # the rows in key order, each with the id of its place in specs
                    cursor.execute(statements["next_job_ids"], {"count": len(rows)})
                    ids = [str(job_id) for (job_id,) in cursor.fetchall()]
                    for start in range(0, len(order), COPY_BATCH_SIZE):
                        with raw.copy(statements["copy_jobs_with_ids"]) as copy:
                            copy.write("".join(f"{ids[i]}\t{rows[i]}" for i in order[start : start + COPY_BATCH_SIZE]))
                cursor.execute(
                    statements["end_copy_jobs"], {"channel": JOBS_CHANNEL, "queues": sorted(bulk.available_queues)}
                )
        except IntegrityError as exc:
            diag = getattr(exc.__cause__, "diag", None)
            if keys and getattr(diag, "constraint_name", None) == UNIQUE_CONSTRAINT:
                with connections[alias].cursor() as cursor:
                    cursor.execute(statements["find_unique_jobs"], {"keys": list(keys)})
                    found = cursor.fetchall()
                kind = found[0][1] if found else "?"
                raise UniqueJobConflictError(kind, [r[0] for r in found], found[0][2] if found else "") from None
            raise
        except OperationalError as exc:
            deadlock = unique_deadlock(exc, (key for key, _ in bulk.keyed))
            if deadlock is None:
                raise
            raise deadlock from exc.__cause__
        from awa_django.inline import after_enqueue_many  # not at import, as in enqueue

        after_enqueue_many(alias, now, len(rows))  # AWA["EXECUTION"] = "immediate": run them once this commits
        notices.after_enqueue(alias, bulk.kinds, bulk.queues)
        return len(rows)

    async def aenqueue_many(self, specs: Iterable[Mapping[str, Any]]) -> int:
        return await sync_to_async(self.enqueue_many)(list(specs))
