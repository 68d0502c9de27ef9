"""Cron expressions in a time zone: which instants a schedule fires at. Pure: no I/O, no clock.

Parsing and wall-clock iteration are croniter's (seconds-first when there are six fields:
``"*/5 * * * * *"`` is every five seconds). What this module adds is the rule that turns the
wall-clock slots of a zone into instants, so daylight-saving changes are explicit:

* Each wall-clock slot fires at most once, and fire instants strictly increase.
* A slot that does not exist (the spring-forward gap: 02:30 on the night clocks go from 02:00 to
  03:00) fires once, at the instant it would have been had the clocks not moved: 03:30 local
  (``fold=0``, PEP 495). A slot whose instant is not after the previous fire is skipped, so a
  ``*/30`` schedule fires at 03:00 (from 02:00) and 03:30 (from 02:30), then 04:00.
* A slot that exists twice (the fall-back hour: 02:30 when clocks go from 03:00 back to 02:00)
  fires once, at its first occurrence; the repeated wall-clock hour fires nothing again. Use
  ``timezone="UTC"`` for sub-hourly schedules that must fire through that hour too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter  # type: ignore[import-untyped]

from awa_django.exceptions import InvalidScheduleError

COALESCE = "coalesce"
CATCH_UP = "catch_up"
MISSED_POLICIES = (COALESCE, CATCH_UP)
CATCH_UP_LIMIT_DEFAULT = 100
CATCH_UP_LIMIT_MAX = 10_000
# next_after walks at most this many wall-clock slots that map to instants already passed (a
# per-second schedule in the repeated fall-back hour walks 3,600).
_MAX_SKIPPED_SLOTS = 100_000
# croniter's random field ("R", "R(0-29)", "R/15", "R(0-29)/15"): a new draw each time the expression
# is read, and every plan reads it afresh, so it has no fixed slots to fire once each.
_RANDOM_FIELD = re.compile(r"r(\(\d+-\d+\))?(/\d+)?", re.IGNORECASE | re.ASCII)


def _naive(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None, fold=0)


@dataclass(frozen=True)
class CronSpec:
    """A validated cron expression and IANA time zone. Build with ``parse``."""

    expression: str
    timezone: str

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def has_seconds(self) -> bool:
        return len(self.expression.split()) == 6

    def _iter(self, start: datetime) -> croniter:
        return croniter(self.expression, start, second_at_beginning=True)

    def _instant(self, wall: datetime) -> datetime:
        return wall.replace(tzinfo=self.zone, fold=0).astimezone(timezone.utc)

    def next_after(self, after: datetime) -> datetime:
        """The first fire instant strictly after ``after`` (an aware datetime), in UTC."""
        iterator = self._iter(_naive(after, self.zone))
        for _ in range(_MAX_SKIPPED_SLOTS):
            instant = self._instant(iterator.get_next(datetime))
            if instant > after:
                return instant
        raise InvalidScheduleError(  # pragma: no cover - needs a zone shifting by days
            self.expression, self.timezone, f"found no slot after {after.isoformat()} within the search bound"
        )

    def previous_slots(self, before: datetime, count: int) -> datetime | None:
        """The wall-clock slot ``count`` steps back from ``before``, as an instant (a lower bound
        for where due slots start), or None if there is none (also when the walk back would leave
        the calendar: a yearly schedule's 10,000th slot back is before year 1, which croniter
        reports as OverflowError or ValueError, not CroniterBadDateError)."""
        iterator = self._iter(_naive(before, self.zone) + timedelta(microseconds=1))
        slot: datetime | None = None
        try:
            for _ in range(count):
                slot = iterator.get_prev(datetime)
        except (CroniterBadDateError, OverflowError, ValueError):
            return None
        return None if slot is None else self._instant(slot)

    def due(self, first: datetime, now: datetime, limit: int) -> tuple[list[datetime], datetime, bool]:
        """The fire instants from ``first`` (a fire instant, inclusive) to ``now`` (inclusive).

        Returns ``(slots, next_fire, skipped)``: at most ``limit`` slots, the latest ones, in
        ascending order; the first fire instant after ``now``; and whether older due slots were
        left out because of the limit. The work is bounded by ``limit``, however long ago
        ``first`` was (a worker down for a week with a per-second schedule costs no more).
        """
        if first > now:
            return [], first, False
        slots: list[datetime] = [first]
        skipped = False
        # Step back past limit wall-clock slots from now: slots before that point could only be
        # dropped by the limit, so they are never enumerated.
        floor = self.previous_slots(now, limit + 2)
        if floor is not None:
            if floor > first:
                slots, skipped = [], True
                cursor = floor
            else:
                cursor = first
        else:
            cursor = first
        while True:
            cursor = self.next_after(cursor)
            if cursor > now:
                break
            slots.append(cursor)
            if len(slots) > limit:
                del slots[0]
                skipped = True
        return slots, cursor, skipped


def parse(expression: object, tz: object = "UTC", *, name: str | None = None) -> CronSpec:
    """Validate a cron expression (5 fields, or 6 with seconds first, or ``@daily``-style) and an
    IANA zone name; raise InvalidScheduleError naming the schedule, the value and the fix."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidScheduleError(expression, tz, "the cron expression must be a non-empty string", name=name)
    expression = " ".join(expression.split())
    if not isinstance(tz, str) or not tz:
        raise InvalidScheduleError(
            expression, tz, "the time zone must be an IANA name such as 'UTC'", name=name, field="timezone"
        )
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidScheduleError(
            expression,
            tz,
            f"{tz!r} is not a known IANA time zone; use a name such as 'Europe/Paris' or 'UTC'",
            name=name,
            field="timezone",
        ) from None
    fields = expression.split()
    if not expression.startswith("@") and len(fields) not in (5, 6):
        raise InvalidScheduleError(
            expression,
            tz,
            f"has {len(fields)} fields; use 5 (minute hour day month weekday) or 6 (second first)",
            name=name,
        )
    random = [field for field in fields if _RANDOM_FIELD.fullmatch(field)]
    if random:
        raise InvalidScheduleError(
            expression,
            tz,
            f"field {random[0]!r} is random (croniter draws a new value each time the schedule is read, so it "
            "has no fixed slot to fire once); write the value, e.g. '17' for minute 17",
            name=name,
        )
    try:
        croniter(expression, datetime(2000, 1, 1), second_at_beginning=True)
    except CroniterBadCronError as exc:
        raise InvalidScheduleError(expression, tz, f"is not a valid cron expression ({exc})", name=name) from None
    spec = CronSpec(expression, tz)
    try:
        spec.next_after(datetime(2000, 1, 1, tzinfo=timezone.utc))
    except CroniterBadDateError:
        raise InvalidScheduleError(expression, tz, "never fires (no date matches it)", name=name) from None
    return spec


def check_policy(policy: object, catch_up_limit: object, *, name: str | None = None) -> None:
    """Validate a missed-fire policy and its bound; raise InvalidScheduleError naming them."""
    if policy not in MISSED_POLICIES:
        raise InvalidScheduleError(
            None,
            None,
            f"missed={policy!r} is not a policy; use one of {list(MISSED_POLICIES)}",
            name=name,
            field="missed",
        )
    if (
        isinstance(catch_up_limit, bool)
        or not isinstance(catch_up_limit, int)
        or not 1 <= catch_up_limit <= CATCH_UP_LIMIT_MAX
    ):
        raise InvalidScheduleError(
            None,
            None,
            f"catch_up_limit={catch_up_limit!r} must be an integer from 1 to {CATCH_UP_LIMIT_MAX}",
            name=name,
            field="catch_up_limit",
        )
