"""The Schedule admin: periodic jobs, their next fire times, the jobs they fired.

Operators create and edit schedules (the cron expression and time zone validated with the
message of ``awa_django.cron.parse``), pause, resume and run them now. Schedules declared in
code show their code-owned fields read-only: the next worker start would overwrite an edit.
Every write goes through ``awa_django.services`` (save_schedule, pause_schedules,
resume_schedules, run_schedules_now), so it never overwrites a fire the leader committed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.admin.helpers import SafeListMixin
from awa_django.cron import check_policy, parse
from awa_django.defaults import MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN, PRIORITY_MAX, PRIORITY_MIN
from awa_django.exceptions import AwaError, InvalidJobError, InvalidScheduleError
from awa_django.forms import FairKeyField
from awa_django.jobspec import check_int, check_name
from awa_django.models import Job, Schedule, ScheduleSource
from awa_django.registry import registry
from awa_django.services.schedules import (
    SCHEDULE_CODE_FIELDS,
    next_fire_after,
    pause_schedules,
    resume_schedules,
    run_schedules_now,
    save_schedule,
)
from awa_django.storable import find_problem

if TYPE_CHECKING:
    _ScheduleAdminBase = admin.ModelAdmin[Schedule]
else:  # ModelAdmin is generic for the type checker only
    _ScheduleAdminBase = admin.ModelAdmin

NEXT_FIRES_SHOWN = 5


class ArgsField(forms.JSONField):
    """Django's JSONField, whose form shown back (with an error) writes a lone surrogate as
    ``\\udcff``: written as the character itself, the page could not be encoded (a 500)."""

    def prepare_value(self, value: Any) -> Any:
        text = super().prepare_value(value)
        if isinstance(value, InvalidJSONInput) or not isinstance(text, str) or text.isascii():
            return text
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(value, cls=self.encoder)  # ensure_ascii: every character escaped
        return text


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    fair_key = FairKeyField(
        help_text="The fired jobs' fair key (e.g. tenant:42); empty = the kind's @job(fair_key=) derived from "
        "the args, else the default key."
    )

    class Meta:
        model = Schedule
        fields = ("name", *SCHEDULE_CODE_FIELDS, "paused")
        field_classes = {"args": ArgsField}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name = data.get("name") or (self.instance.name if self.instance.pk else None)
        self._check_as_in_code(data, name)
        cron, tz = data.get("cron"), data.get("timezone")
        if cron is not None and tz is not None:
            try:
                spec = parse(cron, tz, name=name)
            except InvalidScheduleError as exc:
                self.add_error(exc.field, f"{exc}")
            else:
                data["cron"] = spec.expression
        kind = data.get("kind")
        if kind and "kind" in self.changed_data and registry.get(kind) is None:
            known = ", ".join(sorted(h.kind for h in registry)) or "none"
            self.add_error(
                "kind", f"no @job handler registers kind {kind!r}, so its jobs would fail; known kinds: {known}"
            )
        args = data.get("args")
        if "args" in data and not isinstance(args, dict):
            self.add_error("args", f"args must be a JSON object ({{...}}), not {type(args).__name__}: {args!r}")
        elif isinstance(args, dict) and (unstorable := find_problem(args, "args")) is not None:
            # jsonb refuses a NUL or a lone surrogate: said here, not as a DataError at the INSERT (a 500)
            self.add_error("args", f"{unstorable}, which Postgres cannot store; remove it")
        elif kind and isinstance(args, dict) and self._fires_with(data):
            handler = registry.get(kind)
            check = handler.args_check if handler is not None else None  # no handler: the kind's error says so
            problem = check.mismatch(kind, args) if check is not None else None
            if problem is not None:
                self.add_error("args", problem)
        return data

    def _check_as_in_code(self, data: dict[str, Any], name: str | None) -> None:
        """The rules a schedule declared in code is held to (``schedule_spec``), each error on its
        field: its name and queue are names (no control character, no whitespace around), its
        priority and max_attempts are those a job may have, its catch-up limit is in range."""
        checks: dict[str, Callable[[Any], object]] = {
            "name": lambda value: check_name("name", value, None),
            "queue": lambda value: check_name("queue", value, None),
            "priority": lambda value: check_int("priority", value, PRIORITY_MIN, PRIORITY_MAX, None),
            "max_attempts": lambda value: check_int("max_attempts", value, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX, None),
        }
        for field, check in checks.items():
            if data.get(field) is not None:
                try:
                    check(data[field])
                except InvalidJobError as exc:
                    self.add_error(field, str(exc))
        if data.get("catch_up_limit") is not None and data.get("missed") is not None:
            try:
                check_policy(data["missed"], data["catch_up_limit"], name=name)
            except InvalidScheduleError as exc:
                self.add_error(exc.field, str(exc))

    def _fires_with(self, data: dict[str, Any]) -> bool:
        """Whether the args must fit now: the schedule is saved active, or new, or with another kind or
        other args (a paused row left as it is may keep args its handler no longer takes, until it is
        resumed). Compared with the row (``clean`` runs before the form writes to it): the form's
        changed_data lists args even when the posted JSON is the row's own."""
        row = self.instance
        return not data.get("paused") or row.pk is None or (data.get("kind"), data.get("args")) != (row.kind, row.args)


def _local(moment: datetime | None, tz: str) -> str:
    if moment is None:
        return "—"
    try:
        zone = ZoneInfo(tz)
    except (ValueError, KeyError):
        zone = ZoneInfo("UTC")
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


@admin.register(Schedule)
class ScheduleAdmin(SafeListMixin, _ScheduleAdminBase):
    form = ScheduleForm
    list_display = ("name", "kind", "cron", "timezone", "status", "next_fire", "last_fire", "last_job", "jobs")
    list_filter = ("paused", "source", "missed")
    search_fields = ("name", "kind")
    actions = ("pause_selected", "resume_selected", "run_selected_now")
    readonly_fields = (
        "status",
        "source",
        "next_fires",
        "last_fire",
        "last_job",
        "jobs",
        "removed_from_code_at",
        "created_at",
        "updated_at",
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> tuple[str, ...]:
        fields = tuple(self.readonly_fields)
        if obj is not None and obj.source == ScheduleSource.CODE:
            # Code owns these: the next worker start would put the declared values back.
            fields = (*SCHEDULE_CODE_FIELDS, "name", *fields)
        elif obj is not None:
            fields = ("name", *fields)  # the jobs it fired carry the name
        return fields

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        save_schedule(obj, form.changed_data if change else None)

    # --- columns and detail fields ---

    @admin.display(description="status")
    def status(self, obj: Schedule) -> str:
        if obj.removed_from_code_at is not None:
            return (
                f"disabled: removed from code on {obj.removed_from_code_at:%Y-%m-%d %H:%M} UTC "
                "(declare it again to re-enable it, or delete it)"
            )
        return "paused" if obj.paused else "active"

    @admin.display(description="next fire", ordering="next_fire_at")
    def next_fire(self, obj: Schedule) -> str:
        return _local(obj.next_fire_at, obj.timezone) if obj.is_active else "—"

    @admin.display(description="next fire times")
    def next_fires(self, obj: Schedule) -> SafeString | str:
        if obj.pk is None:
            return "—"
        try:
            times = next_fire_after(obj, count=NEXT_FIRES_SHOWN)
        except InvalidScheduleError as exc:
            return f"{exc}"
        items = ((_local(t, obj.timezone), t.strftime("%Y-%m-%d %H:%M:%S UTC")) for t in times)
        note = "" if obj.is_active else " (not firing while paused or disabled)"
        return format_html("<ol>{}</ol>{}", format_html_join("", "<li>{} ({})</li>", items), note)

    @admin.display(description="last fire", ordering="last_fire_at")
    def last_fire(self, obj: Schedule) -> str:
        return _local(obj.last_fire_at, obj.timezone)

    @admin.display(description="last job")
    def last_job(self, obj: Schedule) -> SafeString | str:
        if obj.last_job_id is None:
            return "—"
        if not Job.objects.filter(pk=obj.last_job_id).exists():
            return f"#{obj.last_job_id} (deleted)"
        url = reverse("admin:awa_job_change", args=[obj.last_job_id], current_app=self.admin_site.name)
        return format_html('<a href="{}">#{}</a>', url, obj.last_job_id)

    @admin.display(description="jobs")
    def jobs(self, obj: Schedule) -> SafeString | str:
        if obj.pk is None:
            return "—"
        url = reverse("admin:awa_job_changelist", current_app=self.admin_site.name)
        query = urlencode({"kind": obj.kind, "metadata__schedule": obj.name})
        return format_html('<a href="{}?{}">its jobs</a>', url, query)

    # --- actions ---

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        names = list(queryset.values_list("name", flat=True))
        done = pause_schedules(names)
        self.message_user(request, f"Paused {done} of {len(names)} selected schedule(s).", messages.SUCCESS)

    @admin.action(description="Resume selected schedules (from the next slot)", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        names = list(queryset.values_list("name", flat=True))
        done = resume_schedules(names)
        self.message_user(request, f"Resumed {done} of {len(names)} selected schedule(s).", messages.SUCCESS)

    @admin.action(description="Run selected schedules now (the schedule does not move)", permissions=["change"])
    def run_selected_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        names = list(queryset.values_list("name", flat=True))
        jobs: list[Job] = []
        for name in names:  # one at a time: a row whose job cannot be enqueued must not stop the others
            try:
                jobs.extend(run_schedules_now([name]))
            except AwaError as exc:  # e.g. InvalidJobError: args written around this admin's form
                self.message_user(
                    request,
                    f"Schedule {name!r} was not run: {exc}. Correct its kind or args on its page (or in the "
                    "code that declares it), then run it again.",
                    messages.ERROR,
                )
        if jobs or not names:
            ids = ", ".join(f"#{job.pk}" for job in jobs)
            self.message_user(request, f"Enqueued {len(jobs)} job(s) now: {ids}.", messages.SUCCESS)
