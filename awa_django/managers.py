"""The enqueue API: ``Job.objects.enqueue`` / ``aenqueue`` / ``enqueue_many``.

Every path validates its input completely before anything is written, and writes on Django's
own connection, so a job joins the caller's transaction: commit and it exists, roll back and it
never did. Available jobs wake idle workers through a NOTIFY sent by a statement trigger, which
Postgres delivers at commit, once per queue per transaction.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, connections, models, transaction
from django.utils import timezone

from awa_django.conf import awa_settings
from awa_django.defaults import (
    MAX_ATTEMPTS_DEFAULT,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    NAME_MAX_LENGTH,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_DEFAULT,
)
from awa_django.exceptions import InvalidJobError, UniqueJobConflictError
from awa_django.inline import after_enqueue, after_enqueue_many
from awa_django.notices import notices
from awa_django.observability import tracing
from awa_django.observability.joblog import warn_unknown_kind
from awa_django.registry import registry
from awa_django.sql import statements
from awa_django.validation import UnstorableValueError, brief, storable_json, text_problem

if TYPE_CHECKING:
    from awa_django.models import Job

UNIQUE_CONSTRAINT = "awa_job_unique_key_uniq"
ACTIVE_STATES = ("scheduled", "available", "running", "retryable")
ALL_STATES = ("scheduled", "available", "running", "completed", "retryable", "failed", "cancelled")
COPY_BATCH_SIZE = 10_000
# unique={"by_period": ...} bounds: the time bucket is floor(epoch seconds / period), which must be
# a finite number (a period of 1e-320 s or 10**400 s is not a period anyone means).
UNIQUE_PERIOD_MIN = 0.001
UNIQUE_PERIOD_MAX = 3_155_760_000  # 100 years of 365.25 days


@dataclass(frozen=True)
class UniqueOptions:
    """What a unique job's key covers, and in which states it is enforced.

    The key always covers the kind; ``by_args`` and ``by_queue`` add the args and the queue;
    ``by_period`` (seconds or a timedelta) adds the time bucket the job is enqueued in, so one
    job per period. ``states`` are the states in which a second job with the key is refused;
    by default the non-terminal ones, so a finished job can be enqueued again.
    """

    by_args: bool = True
    by_queue: bool = False
    by_period: float | timedelta | None = None
    states: tuple[str, ...] = ACTIVE_STATES


class _Row(NamedTuple):
    """A validated job, in the column order of insert_job / copy_jobs."""

    kind: str
    queue: str
    args: dict[str, Any]
    args_json: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    metadata: dict[str, Any]
    metadata_json: str
    tags: list[str]
    unique_key: str | None
    unique_states: list[str] | None


def _check_name(field: str, value: object, index: int | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJobError(field, value, "must be a non-empty string", index=index)
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidJobError(
            field, value, f"is {len(value)} characters long; the limit is {NAME_MAX_LENGTH}", index=index
        )
    problem = text_problem(value)
    if problem:
        raise InvalidJobError(field, value, problem, index=index)
    return value if type(value) is str else str.__str__(value)


def _check_int(field: str, value: object, low: int, high: int, index: int | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidJobError(field, value, f"must be an integer from {low} to {high}", index=index)
    return value if type(value) is int else int.__int__(value)  # an int subclass may print itself oddly


def _check_json_object(field: str, value: object, index: int | None) -> tuple[dict[str, Any], str]:
    """A JSON object (args, metadata) as a dict and its JSON text: one walk, one encoding pass."""
    if value is None:
        return {}, "{}"
    if not isinstance(value, Mapping):
        raise InvalidJobError(field, value, f"must be a dict (JSON object), not {type(value).__name__}", index=index)
    try:
        text = storable_json(value if isinstance(value, dict) else dict(value))
    except UnstorableValueError as exc:
        raise InvalidJobError(field, value, exc.reason, index=index) from None
    except Exception as exc:  # a Mapping whose items cannot be read
        raise InvalidJobError(
            field, value, f"could not be read as a dict ({type(exc).__name__})", index=index
        ) from None
    return dict(value), text


def _check_run_at(value: object, index: int | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJobError("run_at", value, "must be a datetime or None", index=index)
    if settings.USE_TZ and timezone.is_naive(value):
        raise InvalidJobError(
            "run_at",
            value,
            "is naive but USE_TZ is on; pass an aware datetime (django.utils.timezone.now())",
            index=index,
        )
    if not settings.USE_TZ and timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_default_timezone())
    return value


def _check_tags(value: object, index: int | None) -> list[str]:
    if value is None:
        return []
    # A list or a tuple only: a dict would give its keys, a str its characters, a set no order.
    if not isinstance(value, list | tuple):
        raise InvalidJobError("tags", value, f"must be a list of strings, not {type(value).__name__}", index=index)
    limit = awa_settings().MAX_TAGS
    if len(value) > limit:
        raise InvalidJobError("tags", value, f"has {len(value)} tags; the limit is {limit}", index=index)
    max_length = awa_settings().MAX_TAG_LENGTH
    tags: list[str] = []
    for tag in value:
        if not isinstance(tag, str) or not tag or len(tag) > max_length or "\x00" in tag:
            raise InvalidJobError(
                "tags",
                value,
                f"tag {brief(tag, 80)} must be a non-empty string, without NUL, of at most {max_length} characters",
                index=index,
            )
        problem = text_problem(tag)
        if problem:
            raise InvalidJobError("tags", value, f"tag {brief(tag, 80)} {problem}", index=index)
        tags.append(tag if type(tag) is str else str.__str__(tag))
    return tags


def _period_seconds(period: object) -> float | None:
    """``by_period`` as float seconds, or None if it is not a number in the allowed range."""
    if isinstance(period, bool) or not isinstance(period, int | float):
        return None
    try:
        seconds = float(period)
    except OverflowError:  # an int beyond float range: certainly above the limit
        return None
    return seconds if UNIQUE_PERIOD_MIN <= seconds <= UNIQUE_PERIOD_MAX else None  # NaN fails both


def _unique_options(value: object, index: int | None) -> UniqueOptions | None:
    if value is None or value is False:
        return None
    if value is True:
        return UniqueOptions()
    if isinstance(value, UniqueOptions):
        options = value
    elif isinstance(value, Mapping):
        unknown = set(value) - {"by_args", "by_queue", "by_period", "states"}
        if unknown:
            raise InvalidJobError(
                "unique",
                value,
                f"unknown option(s) {brief(sorted(unknown, key=brief))}; use by_args, by_queue, by_period, states",
                index=index,
            )
        for flag in ("by_args", "by_queue"):
            if flag in value and not isinstance(value[flag], bool):
                raise InvalidJobError(f"unique.{flag}", value[flag], "must be True or False", index=index)
        states = value.get("states", ACTIVE_STATES)
        if isinstance(states, str) or not isinstance(states, Iterable):
            raise InvalidJobError(
                "unique.states", states, f"must be a non-empty subset of {list(ALL_STATES)}", index=index
            )
        options = UniqueOptions(
            by_args=value.get("by_args", True),
            by_queue=value.get("by_queue", False),
            by_period=value.get("by_period"),
            states=tuple(states),
        )
    else:
        raise InvalidJobError("unique", value, "must be True, a dict of options or UniqueOptions", index=index)
    period = options.by_period
    if isinstance(period, timedelta):
        period = period.total_seconds()
    if period is not None:
        seconds = _period_seconds(period)
        if seconds is None:
            raise InvalidJobError(
                "unique.by_period",
                options.by_period,
                f"must be a positive number of seconds from {UNIQUE_PERIOD_MIN} to {UNIQUE_PERIOD_MAX} (100 years)",
                index=index,
            )
        period = seconds
    if isinstance(options.states, str) or not isinstance(options.states, Iterable):
        raise InvalidJobError(
            "unique.states", options.states, f"must be a non-empty subset of {list(ALL_STATES)}", index=index
        )
    bad = [s for s in options.states if s not in ALL_STATES]
    if bad or not options.states:
        raise InvalidJobError(
            "unique.states", options.states, f"must be a non-empty subset of {list(ALL_STATES)}", index=index
        )
    # A job moves between the waiting states by itself (promotion, claim, retry): enforcing in only
    # some of them would let two duplicates collide later inside the worker, where no caller sees it.
    missing = [s for s in ACTIVE_STATES if s not in options.states]
    if missing:
        raise InvalidJobError(
            "unique.states",
            options.states,
            f"must include every waiting or running state {list(ACTIVE_STATES)} (missing {missing}); "
            "add terminal states (completed, failed, cancelled) to also refuse after a job finished",
            index=index,
        )
    return UniqueOptions(options.by_args, options.by_queue, period, tuple(dict.fromkeys(options.states)))


def _unique_key(options: UniqueOptions, kind: str, args_json: str, queue: str, now: datetime) -> str:
    parts: dict[str, Any] = {"kind": kind}
    if options.by_args:
        parts["args"] = json.loads(args_json)  # re-parsed so that key order does not matter
    if options.by_queue:
        parts["queue"] = queue
    if options.by_period is not None:
        period = float(options.by_period)  # type: ignore[arg-type]
        parts["period"] = math.floor(now.timestamp() / period)
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def build_row(
    kind: object,
    args: object = None,
    *,
    queue: object = QUEUE_DEFAULT,
    priority: object = PRIORITY_DEFAULT,
    run_at: object = None,
    max_attempts: object = MAX_ATTEMPTS_DEFAULT,
    metadata: object = None,
    tags: object = None,
    unique: object = None,
    now: datetime | None = None,
    index: int | None = None,
) -> _Row:
    """Validate one job spec completely; raise InvalidJobError naming the value and the rule."""
    kind_s = _check_name("kind", kind, index)
    queue_s = _check_name("queue", queue, index)
    args_d, args_json = _check_json_object("args", args, index)
    priority_i = _check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX, index)
    max_attempts_i = _check_int("max_attempts", max_attempts, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX, index)
    run_at_d = _check_run_at(run_at, index)
    metadata_d, metadata_json = _check_json_object("metadata", metadata, index)
    tags_l = _check_tags(tags, index)
    options = _unique_options(unique, index)
    key = states = None
    if options is not None:
        key = _unique_key(options, kind_s, args_json, queue_s, now or timezone.now())
        states = list(options.states)
    return _Row(
        kind_s,
        queue_s,
        args_d,
        args_json,
        priority_i,
        max_attempts_i,
        run_at_d,
        metadata_d,
        metadata_json,
        tags_l,
        key,
        states,
    )


def _copy_text(value: str) -> str:
    """A string as a COPY text-format field (backslash, tab, newline and carriage return escaped)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def _copy_array(values: Sequence[str]) -> str:
    """A list of strings as a COPY text-format Postgres array literal: {"a","b"}."""
    if not values:
        return "{}"
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return _copy_text("{" + ",".join(quoted) + "}")


class KindDefaults(NamedTuple):
    """What an enqueue that leaves queue, priority or max_attempts out gets for a kind."""

    queue: str
    priority: int
    max_attempts: int


_PLAIN_DEFAULTS = KindDefaults(QUEUE_DEFAULT, PRIORITY_DEFAULT, MAX_ATTEMPTS_DEFAULT)
_UNSEEN = object()  # no spec has been seen yet (None is a spec's value: "the default")


def kind_defaults(kind: object) -> KindDefaults:
    """The ``@job`` options of ``kind`` when it is registered, else the package defaults.

    Only ``@job`` handlers count (a dict lookup); the values were validated when it registered.
    """
    handler = registry.registered(kind) if isinstance(kind, str) else None
    if handler is None:
        return _PLAIN_DEFAULTS
    return KindDefaults(handler.queue, handler.priority, handler.max_attempts)


_FAST_KEYS = frozenset({"kind", "args", "queue", "priority", "max_attempts"})
_SPEC_KEYS = frozenset({"kind", "args", "queue", "priority", "run_at", "max_attempts", "metadata", "tags", "unique"})


def _execute_prepared(alias: str, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement on Django's connection (so in the caller's transaction) and return its row.

    Django's cursors bind parameters on the client and never prepare; enqueue is hot enough that a
    server-side prepared statement matters (~1.3x jobs/s here). So, unless Django is recording
    queries (DEBUG, tests counting queries) or someone installed an execute wrapper, this runs on
    a psycopg server-binding cursor over the same connection, prepared, with the same checks and
    error translation as Django's cursor. AWA["PREPARED_STATEMENTS"] = False, or AWA["POOLER"] =
    "transaction" with PREPARED_STATEMENTS unset, turns it off (a transaction pooler hands each
    transaction a different server session, where the prepared statement does not exist).
    """
    connection = connections[alias]
    if connection.queries_logged or connection.execute_wrappers or not awa_settings().use_prepared_statements:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()  # type: ignore[no-any-return]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off on its connections (psycopg then ignores prepare=True too).
        # Its own cursors bind on the client and never prepare, so a threshold no query reaches
        # lets explicit prepares through and changes nothing else; with server-side binding
        # configured, Django's queries would start preparing, so leave the connection alone.
        if not issubclass(raw.cursor_factory, psycopg.ClientCursor):
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()  # type: ignore[no-any-return]
        raw.prepare_threshold = 2**31 - 1
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()


class JobQuerySet(models.QuerySet["Job"]):
    """Query helpers named after the job states."""

    def scheduled(self) -> JobQuerySet:
        return self.filter(state="scheduled")

    def available(self) -> JobQuerySet:
        return self.filter(state="available")

    def running(self) -> JobQuerySet:
        return self.filter(state="running")

    def completed(self) -> JobQuerySet:
        return self.filter(state="completed")

    def retryable(self) -> JobQuerySet:
        return self.filter(state="retryable")

    def failed(self) -> JobQuerySet:
        return self.filter(state="failed")

    def cancelled(self) -> JobQuerySet:
        return self.filter(state="cancelled")

    def finished(self) -> JobQuerySet:
        return self.filter(state__in=["completed", "failed", "cancelled"])

    def stale(self, older_than: timedelta) -> JobQuerySet:
        """Running jobs whose last heartbeat is older than ``older_than``."""
        return self.running().filter(heartbeat_at__lt=timezone.now() - older_than)


class JobManager(models.Manager["Job"]):
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
    ) -> Job:
        """Insert one job in the caller's transaction and return it.

        ``queue``, ``priority`` and ``max_attempts`` left out (or None) are the kind's ``@job``
        options when it is registered, else ``"default"``, 2 and 25. A kind with no handler, or a
        queue no live worker serves, is logged once as a warning (see ``awa_django.notices``).

        Raises InvalidJobError before writing anything if an argument is invalid, and
        UniqueJobConflictError (naming the existing job's id) if ``unique`` refuses it.
        """
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
        warn_unknown_kind(row.kind)
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
        }
        inserted = _execute_prepared(alias, statements["insert_job"], params)
        if inserted is None:
            assert row.unique_key is not None
            with connections[alias].cursor() as cursor:
                cursor.execute(statements["find_unique_jobs"], {"keys": [row.unique_key]})
                raise UniqueJobConflictError(row.kind, [r[0] for r in cursor.fetchall()], row.unique_key)
        job_id, state, run_at_db, created_at = inserted
        values = {
            "id": job_id, "kind": row.kind, "queue": row.queue, "args": row.args, "state": state,
            "priority": row.priority, "attempt": 0, "max_attempts": row.max_attempts, "run_at": run_at_db,
            "attempted_at": None, "heartbeat_at": None, "deadline_at": None, "finalized_at": None,
            "created_at": created_at, "errors": [], "metadata": row.metadata, "tags": row.tags,
            "progress": None, "result": None, "unique_key": row.unique_key,
            "unique_states": row.unique_states, "run_lease": 0,
        }  # fmt: skip
        names = [field.attname for field in self.model._meta.concrete_fields]  # from_db wants model order
        after_enqueue(alias, [job_id])  # AWA["EXECUTION"] = "immediate": run it once this commits
        notices.after_enqueue(alias, (row.kind,), (row.queue,))
        return self.model.from_db(alias, names, [values[name] for name in names])

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
    ) -> Job:
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
        )

    def enqueue_many(self, specs: Iterable[Mapping[str, Any]]) -> int:
        """Insert many jobs with COPY, all or nothing, in the caller's transaction; return the count.

        Each spec is a dict with ``enqueue``'s parameter names and defaults (queue, priority and
        max_attempts from the kind's ``@job`` options). Every spec is validated first: one
        bad spec raises InvalidJobError (naming its index) before anything is written. A unique
        spec that collides with an existing job or with another spec in the call raises
        UniqueJobConflictError and nothing of the call is kept.
        """
        now = timezone.now()
        now_text = now.isoformat()
        rows: list[str] = []  # COPY text-format lines, in copy_jobs' column order
        keys: dict[str, tuple[str, list[str]]] = {}
        indexed: set[str] = set()  # unique keys of this call's rows that the partial unique index covers
        # The common spec ({kind, args[, queue, priority, max_attempts]}) takes a short path with
        # the same rules: names already checked in this call are not checked again, and the line
        # tail is shared. Anything else goes through build_row, like enqueue.
        names_ok: set[str] = set()  # kinds
        by_kind: dict[str, KindDefaults] = {}  # each kind's defaults, looked up once per call
        queues_seen: set[str] = set()
        last_kind: object = _UNSEEN  # the previous fast-path spec's kind and queue, with the kind's defaults
        last_queue: object = _UNSEEN
        d_queue, d_priority, d_max_attempts = _PLAIN_DEFAULTS
        trace = tracing.current_trace()  # None unless OpenTelemetry has a current span
        trace_json = "{}" if trace is None else json.dumps(trace).replace("\\", "\\\\")
        defaults_tail = f"\t{now_text}\t{now_text}\t[]\t{trace_json}\t{{}}\t\\N\t\\N\t0\n"
        for index, spec in enumerate(specs):
            if type(spec) is dict and spec.keys() <= _FAST_KEYS and "kind" in spec:
                kind = spec["kind"]
                if kind is not last_kind:  # a bulk call is mostly one kind: look it up once per run
                    if type(kind) is not str or kind not in names_ok:
                        kind = _check_name("kind", kind, index)
                        names_ok.add(kind)
                        warn_unknown_kind(kind)
                    defaults = by_kind.get(kind)
                    if defaults is None:
                        defaults = by_kind[kind] = kind_defaults(kind)
                    last_kind = kind
                    d_queue, d_priority, d_max_attempts = defaults
                queue = spec.get("queue", d_queue)
                if queue is not last_queue:
                    if queue is None:
                        queue = d_queue
                    if type(queue) is not str or queue not in queues_seen:
                        queue = _check_name("queue", queue, index)
                        queues_seen.add(queue)
                    last_queue = queue
                args = spec.get("args")
                if type(args) is dict and not args:
                    args_json = "{}"
                else:
                    args_json = _check_json_object("args", args, index)[1]
                # The kind's defaults were validated when it registered; anything else is checked.
                priority = spec.get("priority", d_priority)
                if priority is not d_priority:
                    priority = (
                        d_priority
                        if priority is None
                        else _check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX, index)
                    )
                max_attempts = spec.get("max_attempts", d_max_attempts)
                if max_attempts is not d_max_attempts:
                    max_attempts = (
                        d_max_attempts
                        if max_attempts is None
                        else _check_int("max_attempts", max_attempts, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX, index)
                    )
                rows.append(
                    f"{_copy_text(kind)}\t{_copy_text(queue)}\t{args_json.replace(chr(92), chr(92) * 2)}"
                    f"\tavailable\t{priority}\t0\t{max_attempts}{defaults_tail}"
                )
                continue
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
            if trace is not None:
                options["metadata"] = tracing.with_traceparent(options.get("metadata"))
            if isinstance(options["kind"], str):
                defaults = by_kind.get(options["kind"]) or by_kind.setdefault(
                    options["kind"], kind_defaults(options["kind"])
                )
                for key, value in defaults._asdict().items():
                    if options.get(key) is None:
                        options[key] = value
            row = build_row(**options, now=now, index=index)
            warn_unknown_kind(row.kind)
            queues_seen.add(row.queue)
            run_at = row.run_at or now
            state = "scheduled" if run_at > now else "available"
            if row.unique_key is not None:
                assert row.unique_states is not None
                if state in row.unique_states:
                    if row.unique_key in indexed:
                        raise UniqueJobConflictError(row.kind, [], row.unique_key, spec_index=index)
                    indexed.add(row.unique_key)
                keys[row.unique_key] = (state, row.unique_states)
            rows.append(
                "\t".join(
                    (
                        _copy_text(row.kind),
                        _copy_text(row.queue),
                        row.args_json.replace("\\", "\\\\"),  # JSON text: only backslashes need doubling
                        state,
                        str(row.priority),
                        "0",
                        str(row.max_attempts),
                        now_text if row.run_at is None else row.run_at.isoformat(),
                        now_text,
                        "[]",
                        row.metadata_json.replace("\\", "\\\\"),
                        _copy_array(row.tags),
                        "\\N" if row.unique_key is None else row.unique_key,
                        "\\N" if row.unique_states is None else _copy_array(row.unique_states),
                        "0\n",
                    )
                )
            )
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
                for start in range(0, len(rows), COPY_BATCH_SIZE):
                    with raw.copy(statements["copy_jobs"]) as copy:
                        copy.write("".join(rows[start : start + COPY_BATCH_SIZE]))
        except IntegrityError as exc:
            diag = getattr(exc.__cause__, "diag", None)
            if keys and getattr(diag, "constraint_name", None) == UNIQUE_CONSTRAINT:
                with connections[alias].cursor() as cursor:
                    cursor.execute(statements["find_unique_jobs"], {"keys": list(keys)})
                    found = cursor.fetchall()
                kind = found[0][1] if found else "?"
                raise UniqueJobConflictError(kind, [r[0] for r in found], found[0][2] if found else "") from None
            raise
        after_enqueue_many(alias, now, len(rows))  # AWA["EXECUTION"] = "immediate": run them once this commits
        notices.after_enqueue(alias, by_kind, queues_seen)
        return len(rows)

    async def aenqueue_many(self, specs: Iterable[Mapping[str, Any]]) -> int:
        return await sync_to_async(self.enqueue_many)(list(specs))
