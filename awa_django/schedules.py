"""Schedules declared in code: ``schedule(...)`` and ``@job(cron=...)`` add a ``ScheduleSpec`` here,
and the worker synchronises them into ``Schedule`` rows at start (``awa_django.services.schedules``).

A schedule takes its kind's options (queue, priority, max_attempts, fair key rule) from the kind's
handler in the registry (``awa_django.handlers``), and its args are checked against the handler's
signature where it is declared, whichever of the two is declared first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from awa_django.arguments import ArgsCheck
from awa_django.cron import check_policy, parse
from awa_django.defaults import MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT, QUEUE_DEFAULT
from awa_django.exceptions import InvalidJobError, InvalidScheduleError
from awa_django.handlers import Handler, Registry, RegistryError, registry
from awa_django.jobspec import FairKeyRule, build_row, check_fair_key, derive_fair_key
from awa_django.validation import brief


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule declared in code: synchronised into a ``Schedule`` row at worker start."""

    name: str
    kind: str
    cron: str
    timezone: str = "UTC"
    args: dict[str, Any] = field(default_factory=dict)
    queue: str = QUEUE_DEFAULT
    priority: int = PRIORITY_DEFAULT
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    missed: str = "coalesce"
    catch_up_limit: int = 100
    paused: bool = False  # the state a new row starts in; operators pause/resume it afterwards
    fair_key: str = ""  # the fired jobs' key; "" = the kind's derived key when it fires, else the default key


class Schedules:
    """The schedules declared in code, by name."""

    def __init__(self) -> None:
        self._specs: dict[str, ScheduleSpec] = {}

    def add(self, spec: ScheduleSpec) -> ScheduleSpec:
        existing = self._specs.get(spec.name)
        if existing is not None and existing != spec:
            raise RegistryError(
                f"schedule {spec.name!r} is already declared (kind {existing.kind!r}, cron {existing.cron!r}); "
                "give each schedule its own name"
            )
        self._specs[spec.name] = spec
        return spec

    def remove(self, name: str) -> None:
        self._specs.pop(name, None)

    def __iter__(self) -> Iterator[ScheduleSpec]:
        """Every schedule declared in code, by name."""
        return iter([self._specs[name] for name in sorted(self._specs)])


schedules = Schedules()


def check_schedule_args(spec: ScheduleSpec, check: ArgsCheck | None) -> None:
    """A schedule's args against its kind's handler: InvalidScheduleError naming the mismatch."""
    if check is None:
        return
    problem = check.problem(spec.args)
    if problem is not None:
        raise InvalidScheduleError(
            None,
            None,
            f"args {brief(spec.args)} do not match the handler of {spec.kind!r}: {problem}; it is {check.text}",
            name=spec.name,
            field="args",
        )


def check_schedule_key(spec: ScheduleSpec, rule: FairKeyRule | None) -> None:
    """A schedule without a key of its own gets its kind's derived key when it fires: that the rule
    gives one for the schedule's args is checked where the schedule is declared."""
    if spec.fair_key or rule is None:
        return
    try:
        derive_fair_key(spec.kind, rule, spec.args)
    except InvalidJobError as exc:
        raise InvalidScheduleError(None, None, str(exc), name=spec.name, field="fair_key") from None


def schedule_spec(
    name: str,
    kind: str,
    cron: str,
    *,
    timezone: str,
    args: dict[str, Any] | None,
    queue: str,
    priority: int,
    max_attempts: int,
    missed: str,
    catch_up_limit: int,
    paused: bool,
    fair_key: object = None,
    key_rule: FairKeyRule | None = None,
) -> ScheduleSpec:
    try:
        row = build_row(kind, args, queue=queue, max_attempts=max_attempts, priority=priority)
        build_row(name)  # a schedule's name follows the rules of a kind (non-empty, 255 characters)
        key = "" if fair_key is None else check_fair_key(fair_key)
    except InvalidJobError as exc:
        where = name if isinstance(name, str) else None
        raise InvalidScheduleError(None, None, str(exc), name=where, field=exc.field) from None
    spec = parse(cron, timezone, name=name)
    check_policy(missed, catch_up_limit, name=name)
    if not isinstance(paused, bool):
        raise InvalidScheduleError(None, None, f"paused={paused!r} must be True or False", name=name, field="paused")
    result = ScheduleSpec(
        name,
        kind,
        spec.expression,
        spec.timezone,
        row.args,
        queue,
        priority,
        max_attempts,
        missed,
        catch_up_limit,
        paused,
        key,
    )
    check_schedule_key(result, key_rule)
    return result


def schedule(
    name: str,
    kind: str | Handler,
    cron: str,
    *,
    timezone: str = "UTC",
    args: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    missed: str = "coalesce",
    catch_up_limit: int = 100,
    paused: bool = False,
    fair_key: str | None = None,
    registry: Registry = registry,
    book: Schedules = schedules,
) -> ScheduleSpec:
    """Declare a periodic job: the schedule ``name`` fires ``kind`` with ``args`` at each slot of
    ``cron`` (5 fields, or 6 with seconds first) in ``timezone`` (an IANA name).

    ``missed`` is what happens to slots that passed while no worker led: ``"coalesce"`` fires one
    job for the latest of them, ``"catch_up"`` fires each, the latest ``catch_up_limit`` at most.
    ``paused`` is the state the schedule's row starts in. Queue, priority and max_attempts default
    to the kind's ``@job`` options. ``fair_key`` is the fired jobs' fairness key; left out, they get
    the kind's ``@job(fair_key=)`` derived from ``args`` when the schedule fires, else the default
    key. Raises InvalidScheduleError naming the bad value.
    """
    handler = kind if isinstance(kind, Handler) else registry.registered(kind)
    kind_name = kind.kind if isinstance(kind, Handler) else kind
    spec = schedule_spec(
        name,
        kind_name,
        cron,
        timezone=timezone,
        args=args,
        queue=queue if queue is not None else handler.queue if handler else QUEUE_DEFAULT,
        priority=priority if priority is not None else handler.priority if handler else PRIORITY_DEFAULT,
        max_attempts=(
            max_attempts if max_attempts is not None else handler.max_attempts if handler else MAX_ATTEMPTS_DEFAULT
        ),
        missed=missed,
        catch_up_limit=catch_up_limit,
        paused=paused,
        fair_key=fair_key,
        key_rule=handler.fair_key if handler else None,
    )
    if handler is not None:
        check_schedule_args(spec, handler.args_check)
    return book.add(spec)
