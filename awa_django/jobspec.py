"""One job spec, validated completely, as a row: the rules every enqueue path shares.

``build_row`` checks a spec (kind, queue, args, priority, run_at, max_attempts, metadata, tags,
unique, fair_key) and returns a ``JobRow``, or raises InvalidJobError naming the field, the value and the
rule. ``copy_line`` writes a row as a line of ``copy_jobs``' COPY text input: the one place
that knows that statement's column order. ``@job``, ``schedule``, the Tasks backend and the
enqueue API all validate here, so a spec is accepted or refused the same way everywhere.

Needs Django's settings (USE_TZ, the AWA tag limits) but no model, the registry or a connection.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any, NamedTuple

from django.conf import settings
from django.utils import timezone

from awa_django.conf import awa_settings
from awa_django.defaults import (
    FAIR_KEY_DEFAULT,
    FAIR_KEY_MAX_LENGTH,
    MAX_ATTEMPTS_DEFAULT,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    NAME_MAX_LENGTH,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_DEFAULT,
)
from awa_django.exceptions import InvalidJobError
from awa_django.states import JobState
from awa_django.validation import UnstorableValueError, brief, storable_json, text_problem

KIND_DEFAULTED = ("queue", "priority", "max_attempts")
"""The enqueue options a kind's ``@job`` fills in where an enqueue leaves them out or passes None."""
ACTIVE_STATES = tuple(state.value for state in JobState if not state.is_terminal)
ALL_STATES = tuple(state.value for state in JobState)
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


class JobRow(NamedTuple):
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
    fair_key: str = FAIR_KEY_DEFAULT

    def model_values(self) -> dict[str, Any]:
        """The ``Job`` fields this spec sets, by attribute name (the database sets the rest)."""
        return {
            "kind": self.kind,
            "queue": self.queue,
            "args": self.args,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "metadata": self.metadata,
            "tags": self.tags,
            "unique_key": self.unique_key,
            "unique_states": self.unique_states,
            "fair_key": self.fair_key,
        }


def check_name(field: str, value: object, index: int | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJobError(field, value, "must be a non-empty string", index=index)
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidJobError(
            field, value, f"is {len(value)} characters long; the limit is {NAME_MAX_LENGTH}", index=index
        )
    problem = text_problem(value) or name_problem(value)
    if problem:
        raise InvalidJobError(field, value, problem, index=index)
    return value if type(value) is str else str.__str__(value)


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a name (a kind, a queue, a workflow or step), beyond its length and
    what Postgres stores, or None: names are matched exactly, in SQL, on the command line, in the
    admin (which strips what is typed), so none starts or ends with whitespace or holds a control
    character (a tab, a newline)."""
    if value != value.strip():
        return "starts or ends with whitespace; remove it (names are matched exactly)"
    if any(unicodedata.category(char) == "Cc" for char in value):
        return "holds a control character (a tab, a newline); use printable characters"
    return None


FAIR_KEY_HINT = (
    "a fairness key is a short string such as 'tenant:42' (empty = the default key that jobs without one share)"
)


def fair_key_problem(value: object) -> str | None:
    """Why ``value`` is not a fairness key, or None: a str of at most FAIR_KEY_MAX_LENGTH characters
    that Postgres can store (no NUL, no lone surrogate); ``""`` is the default key."""
    if not isinstance(value, str):
        return f"must be a str, not {type(value).__name__}; {FAIR_KEY_HINT}"
    if len(value) > FAIR_KEY_MAX_LENGTH:
        return (
            f"is {len(value)} characters long; the limit is {FAIR_KEY_MAX_LENGTH}: use a shorter key "
            "(an id, or a hash of a long one)"
        )
    problem = text_problem(value)
    return None if problem is None else f"{problem}; {FAIR_KEY_HINT}"


def check_fair_key(value: object, index: int | None = None) -> str:
    """``value`` as a fairness key (see ``fair_key_problem``); InvalidJobError naming it otherwise."""
    problem = fair_key_problem(value)
    if problem is not None:
        raise InvalidJobError("fair_key", value, problem, index=index)
    assert isinstance(value, str)
    return value if type(value) is str else str.__str__(value)


FairKeyRule = str | Callable[[dict[str, Any]], str]
"""How a kind derives its jobs' fairness key: a constant, or a callable of the job's args dict."""


def check_fair_key_rule(kind: str, rule: object) -> FairKeyRule | None:
    """``@job(fair_key=...)``: None, a valid constant key, or a callable; InvalidJobError otherwise."""
    if rule is None or callable(rule):
        return rule
    if isinstance(rule, str):
        return check_fair_key(rule)
    raise InvalidJobError(
        "fair_key",
        rule,
        f"job {kind!r}: must be a str or a callable taking the job's args dict and returning one, "
        "e.g. fair_key=lambda args: f\"tenant:{args['tenant_id']}\"",
    )


def derive_fair_key(kind: str, rule: FairKeyRule | None, args: dict[str, Any], index: int | None = None) -> str:
    """The key ``kind``'s ``@job(fair_key=)`` rule gives a job with ``args`` (the default key for no rule).

    A callable that raises, or returns what ``check_fair_key`` refuses, is an InvalidJobError naming
    the kind, the args and the fix: nothing is written.
    """
    if rule is None:
        return FAIR_KEY_DEFAULT
    if isinstance(rule, str):
        return rule
    try:
        derived = rule(args)
    except Exception as exc:
        raise InvalidJobError(
            "fair_key",
            args,
            f"the fair_key rule of job {kind!r} raised {brief(exc, 200)}; "
            "fix the rule (it is called with the job's args dict) or pass fair_key= to the enqueue",
            index=index,
        ) from None
    problem = fair_key_problem(derived)
    if problem is not None:
        raise InvalidJobError(
            "fair_key",
            derived,
            f"returned by the fair_key rule of job {kind!r} for args {brief(args, 120)}: {problem}",
            index=index,
        )
    return derived if type(derived) is str else str.__str__(derived)


def check_int(field: str, value: object, low: int, high: int, index: int | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidJobError(field, value, f"must be an integer from {low} to {high}", index=index)
    return value if type(value) is int else int.__int__(value)  # an int subclass may print itself oddly


def check_json_object(field: str, value: object, index: int | None) -> tuple[dict[str, Any], str]:
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


# The run_at values enqueue accepts, in UTC: a day inside Python's datetime range at either end,
# so that no time derived from it (a retry's backoff, a time zone's offset) leaves it.
RUN_AT_MIN = datetime(1, 1, 2, tzinfo=dt_timezone.utc)
RUN_AT_MAX = datetime(9999, 12, 30, tzinfo=dt_timezone.utc)


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
    # Postgres stores dates Python cannot read back (before year 1 or after 9999 in UTC): such a row
    # would stop every reader of it, the worker's claim and the admin's list among them.
    try:
        in_utc = value.astimezone(dt_timezone.utc)
    except OverflowError:
        in_utc = None
    if in_utc is None or not RUN_AT_MIN <= in_utc <= RUN_AT_MAX:
        raise InvalidJobError(
            "run_at",
            value,
            f"is outside the times Python can read back from Postgres (in UTC); use a datetime between "
            f"{RUN_AT_MIN.isoformat()} and {RUN_AT_MAX.isoformat()}",
            index=index,
        )
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
        if not isinstance(tag, str) or not tag.strip() or len(tag) > max_length or "\x00" in tag:
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
    for flag in ("by_args", "by_queue"):  # UniqueOptions' too: by_queue="false" is not True
        if not isinstance(getattr(options, flag), bool):
            raise InvalidJobError(f"unique.{flag}", getattr(options, flag), "must be True or False", index=index)
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
    fair_key: object = FAIR_KEY_DEFAULT,
    now: datetime | None = None,
    index: int | None = None,
) -> JobRow:
    """Validate one job spec completely; raise InvalidJobError naming the value and the rule.

    ``fair_key`` None is the default key here: a kind's derived key is the enqueue API's to apply.
    """
    kind_s = check_name("kind", kind, index)
    queue_s = check_name("queue", queue, index)
    args_d, args_json = check_json_object("args", args, index)
    priority_i = check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX, index)
    max_attempts_i = check_int("max_attempts", max_attempts, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX, index)
    run_at_d = _check_run_at(run_at, index)
    metadata_d, metadata_json = check_json_object("metadata", metadata, index)
    tags_l = _check_tags(tags, index)
    options = _unique_options(unique, index)
    fair_key_s = FAIR_KEY_DEFAULT if fair_key is None else check_fair_key(fair_key, index)
    key = states = None
    if options is not None:
        key = _unique_key(options, kind_s, args_json, queue_s, now or timezone.now())
        states = list(options.states)
    return JobRow(
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
        fair_key_s,
    )


def copy_text(value: str) -> str:
    """A string as a COPY text-format field (backslash, tab, newline and carriage return escaped)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def copy_array(values: Sequence[str]) -> str:
    """A list of strings as a COPY text-format Postgres array literal: {"a","b"}."""
    if not values:
        return "{}"
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return copy_text("{" + ",".join(quoted) + "}")


def copy_json(text: str) -> str:
    """JSON text as a COPY text-format field: only backslashes need doubling (JSON text holds no
    raw tab, newline or carriage return: it escapes them)."""
    return text.replace("\\", "\\\\")


class CopyLines:
    """Lines of ``copy_jobs``' COPY text input for jobs enqueued at one moment, ``now``.

    The one writer of that statement's column order. A plain job (run now, the call's default
    metadata, no tags, not unique) shares one precomputed tail: a bulk enqueue of plain jobs
    formats only its kind, queue, args, priority and max_attempts.
    """

    def __init__(self, now: datetime, metadata_json: str = "{}") -> None:
        self.now_text = now.isoformat()
        self.metadata_json = metadata_json  # what a job without its own metadata gets
        self._plain_tail = self._tail(self.now_text, metadata_json, "{}", "\\N", "\\N", "\\N", FAIR_KEY_DEFAULT)

    def _tail(
        self,
        run_at: str,
        metadata_json: str,
        tags: str,
        unique_key: str,
        unique_states: str,
        timeout: str,
        fair_key: str,
    ) -> str:
        # run_at, created_at, errors, metadata, tags, unique_key, unique_states, run_lease, timeout, fair_key
        return (
            f"\t{run_at}\t{self.now_text}\t[]\t{copy_json(metadata_json)}\t{tags}\t{unique_key}\t{unique_states}"
            f"\t0\t{timeout}\t{copy_text(fair_key)}\n"
        )

    def line(
        self,
        kind: str,
        queue: str,
        args_json: str,
        state: str,
        priority: int,
        max_attempts: int,
        *,
        run_at: datetime | None = None,
        metadata_json: str | None = None,
        tags: Sequence[str] = (),
        unique_key: str | None = None,
        unique_states: Sequence[str] | None = None,
        timeout: str | None = None,
        fair_key: str = FAIR_KEY_DEFAULT,
    ) -> str:
        """One job as a COPY line; ``run_at`` None means now, ``metadata_json`` None the call's default,
        ``timeout`` (an interval's text, seconds) None the queue's deadline, ``fair_key`` the job's
        fairness key (validated: ``check_fair_key``)."""
        # kind, queue, args, state, priority, attempt, max_attempts
        head = f"{copy_text(kind)}\t{copy_text(queue)}\t{copy_json(args_json)}\t{state}\t{priority}\t0\t{max_attempts}"
        plain_metadata = metadata_json is None or metadata_json == self.metadata_json
        if (
            run_at is None
            and plain_metadata
            and not tags
            and unique_key is None
            and unique_states is None
            and timeout is None
            and not fair_key
        ):
            return head + self._plain_tail
        return head + self._tail(
            self.now_text if run_at is None else run_at.isoformat(),
            self.metadata_json if metadata_json is None else metadata_json,
            copy_array(tags),
            "\\N" if unique_key is None else unique_key,
            "\\N" if unique_states is None else copy_array(unique_states),
            "\\N" if timeout is None else timeout,
            fair_key,
        )

    def row_line(self, row: JobRow, state: str, timeout: str | None = None) -> str:
        """``line`` for a row ``build_row`` validated."""
        return self.line(
            row.kind,
            row.queue,
            row.args_json,
            state,
            row.priority,
            row.max_attempts,
            run_at=row.run_at,
            metadata_json=row.metadata_json,
            tags=row.tags,
            unique_key=row.unique_key,
            unique_states=row.unique_states,
            timeout=timeout,
            fair_key=row.fair_key,
        )
