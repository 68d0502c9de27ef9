"""The Job admin: read-mostly (nobody edits a row; actions move it between states), fast on a
large awa_job table (ordering by the primary key, bounded counts, filters that never scan it),
with a detail page whose Retry and Cancel buttons call the same services as the actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from awa_django.admin.bulk import BulkMixin
from awa_django.admin.deleting import confirm_delete, workflow_impact
from awa_django.admin.failures import FailuresMixin
from awa_django.admin.fairkeys import key_label
from awa_django.admin.filters import FairKeyFilter, KindFilter, ParkedFilter, QueueNameFilter, StateFilter
from awa_django.admin.helpers import SEARCH_COUNT_LIMIT, SafeSelectionMixin, parse_id, pretty_json
from awa_django.admin.history import HistoryMixin
from awa_django.admin.joblist import JobChangeList
from awa_django.admin.paging import AFTER_VAR, AT_VAR, BEFORE_VAR, BoundedCountPaginator, parse_time, time_order
from awa_django.admin.running import RunningNowMixin
from awa_django.admin.search import (
    EVERY_STATE_VAR,
    UNFINISHED_SEARCH_LIMIT,
    answer_within_budget,
    error_search_states,
    estimated_unfinished_jobs,
    indexed_search,
    narrowed_states,
    search_jobs,
    searches_error_text,
)
from awa_django.admin.search import HELP as SEARCH_HELP
from awa_django.admin.steps import StepsMixin, restart_choices
from awa_django.admin.timeline import attempt_timeline, shown_time, time_field
from awa_django.admin.tracebacks import fold_traceback
from awa_django.models import TERMINAL_STATES, Job
from awa_django.services.jobs import RETRYABLE_FROM, cancel_jobs, discard_jobs, retry_jobs
from awa_django.states import JobState
from awa_django.validation import brief

STATES = frozenset(JobState)
# Why retry_jobs leaves a failed or cancelled job as it is (its docstring): retrying it would break
# the uniqueness it asked for.
UNIQUE_KEY_HELD = "another job holds its unique key now; retry it once that job has ended"


def _still_retryable(ids: list[int]) -> int:
    """How many of ``ids`` are still failed or cancelled after retry_jobs: those whose unique key
    another job holds (retry_jobs' only reason to leave such a job)."""
    return Job.objects.filter(pk__in=ids, state__in=RETRYABLE_FROM).count()


if TYPE_CHECKING:
    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin


@admin.register(Job)
class JobAdmin(SafeSelectionMixin, BulkMixin, FailuresMixin, RunningNowMixin, HistoryMixin, StepsMixin):
    list_columns = (
        "id", "kind", "queue", "fair_key", "state", "priority", "attempt", "max_attempts", "run_at", "finalized_at",
    )  # fmt: skip
    list_display = ("id", "kind", "queue", "key_shown", "state_label", "priority", "attempts", "run_at", "finalized_at")
    list_display_links = ("id", "kind")
    list_filter = (
        ("state", StateFilter), ParkedFilter, QueueNameFilter, KindFilter, FairKeyFilter,
        ("created_at", admin.DateFieldListFilter), ("finalized_at", admin.DateFieldListFilter),
    )  # fmt: skip
    search_fields = ("kind",)
    search_help_text = SEARCH_HELP
    ordering = ("-id",)
    sortable_by = ("id",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts would scan the whole table
    paginator = BoundedCountPaginator
    list_per_page = 50
    actions = ("retry_selected", "cancel_selected", "delete_selected")
    change_form_template = "admin/awa/job/change_form.html"
    delete_confirmation_template = "admin/awa/job/delete_confirmation.html"
    change_list_template = "admin/awa/job/change_list.html"
    fieldsets = (
        ("Attempts", {"fields": ("timeline",)}),  # first: how each attempt went, above any traceback
        ("Steps", {"fields": ("steps_timeline",)}),  # a durable job's steps, sleeps and waits (kept when any)
        (None, {"fields": ("id", "kind", "queue", "fair_key", "state_label", "priority", "attempts", "tags")}),
        (
            "Timing",
            {
                "fields": (
                    "created_at_shown",
                    "run_at_shown",
                    "attempted_at_shown",
                    "attempted_by",
                    "heartbeat_at_shown",
                    "deadline_at_shown",
                    "finalized_at_shown",
                )
            },
        ),
        ("Data", {"fields": ("args_pretty", "metadata_pretty", "progress_pretty", "result_pretty")}),
        ("Errors", {"fields": ("errors_pretty",)}),
        ("Workflow", {"fields": ("workflow_links",)}),
        ("Uniqueness and lease", {"classes": ("collapse",), "fields": ("unique_key", "unique_states", "run_lease")}),
    )
    readonly_fields = (
        "id", "kind", "queue", "fair_key", "state_label", "priority", "attempts", "tags", "created_at_shown",
        "run_at_shown", "attempted_at_shown", "attempted_by", "heartbeat_at_shown", "deadline_at_shown",
        "finalized_at_shown", "args_pretty", "metadata_pretty",
        "progress_pretty", "result_pretty", "timeline", "errors_pretty", "unique_key", "unique_states", "run_lease",
        "workflow_links", "steps_timeline",
    )  # fmt: skip

    class Media:
        css = {"all": ("awa/admin.css",)}

    # Read-mostly: nobody edits a job row; the actions move it between states.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        if obj is not None:
            return False  # the detail page is read-only for everyone
        return super().has_change_permission(request)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):  # an action's POST: its own statements, no budget
            return super().changelist_view(request, extra_context)
        return answer_within_budget(request, lambda: super(JobAdmin, self).changelist_view(request, extra_context))

    def get_paginator(self, request: HttpRequest, queryset: Any, per_page: int, *args: Any, **kwargs: Any) -> Any:
        paginator = super().get_paginator(request, queryset, per_page, *args, **kwargs)
        if not isinstance(paginator, BoundedCountPaginator):
            return paginator
        for name in (BEFORE_VAR, AFTER_VAR):
            value = request.GET.get(name)
            if value is None:
                continue
            bound = parse_id(value)
            if bound is None:  # the admin answers a bad lookup by the list with ?e=1
                raise IncorrectLookupParameters(f"{name}={brief(value, 40)}: a page's bound is a job id")
            setattr(paginator, f"awa_{name}", bound)
        paginator.awa_order = time_order(request.GET)
        if paginator.awa_order and paginator.awa_keyset:
            paginator.awa_at = self._keyset_time(request, paginator.awa_order, paginator)
        term = request.GET.get(SEARCH_VAR, "").strip()
        if term and parse_id(term.lstrip("#")) is None:
            paginator.awa_limit = SEARCH_COUNT_LIMIT  # each match a heap page or more: count fewer
            paginator.awa_read_ids = True  # ... and keep their ids for the page
        elif request.GET.get(KindFilter.parameter_name):
            paginator.awa_limit = SEARCH_COUNT_LIMIT  # no index on kind: its count reads rows, as a search's
        return paginator

    @staticmethod
    def _keyset_time(request: HttpRequest, column: str, paginator: BoundedCountPaginator) -> Any:
        """The time in ``column`` of a list's keyset bound: ``?at=`` (the list's own links carry
        it), else the bound job's own (a link made by hand, ``?before=ID``), else None for
        ``after=0`` (the oldest page). A bound with neither is a bad lookup."""
        text = request.GET.get(AT_VAR)
        if text is not None:
            value = parse_time(text)
            if value is None:
                raise IncorrectLookupParameters(
                    f"{AT_VAR}={brief(text, 40)}: a page's bound time is an ISO date and time with its UTC offset"
                )
            return value
        bound = int(paginator.awa_before if paginator.awa_after is None else paginator.awa_after)  # type: ignore[arg-type]
        if paginator.awa_after == 0:
            return None
        found = Job.objects.filter(pk=bound).values_list(column, flat=True).first()
        if found is None:
            raise IncorrectLookupParameters(
                f"{BEFORE_VAR if paginator.awa_after is None else AFTER_VAR}={bound}: no job with that id and "
                f"a {column}; page from the list's own links (they carry {AT_VAR}=)"
            )
        return found

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        # The state filter's value, so the search asks only that state's indexed arm. With none, an
        # indexed search reads every unfinished job (no args or tags index covers them): past
        # UNFINISHED_SEARCH_LIMIT of them it asks the finished states only, unless every_state=1,
        # and the page says so (admin/search.py).
        state = request.GET.get("state__exact")
        states: list[str] | None = [state] if state in STATES else None
        scope = request.GET.get(EVERY_STATE_VAR)  # "1": every state; "0": finished only; absent: by the estimate
        if states is None and scope != "1" and indexed_search(search_term):
            unfinished = estimated_unfinished_jobs()
            if scope == "0" or unfinished > UNFINISHED_SEARCH_LIMIT:
                states = narrowed_states(search_term)
                request.awa_unfinished_skipped = unfinished  # type: ignore[attr-defined]
                request.awa_searched_states = states  # type: ignore[attr-defined]
            elif searches_error_text(search_term):  # every state but completed (no index on its error text)
                states = error_search_states()
                request.awa_completed_skipped = True  # type: ignore[attr-defined]
            request.awa_search_scoped = True  # type: ignore[attr-defined]
        return search_jobs(queryset, search_term, states), False

    # --- columns and detail fields ---

    @admin.display(description="workflow")
    def workflow_links(self, obj: Job) -> SafeString:
        from awa_django.admin.workflows import neighbour_links  # the workflow admin's own rendering

        return neighbour_links(obj, self.admin_site.name)

    @admin.display(description="state", ordering="state")
    def state_label(self, obj: Job) -> SafeString:
        return format_html('<span class="awa-state awa-state-{}">{}</span>', obj.state, obj.state)

    @admin.display(description="fair key")
    def key_shown(self, obj: Job) -> SafeString:
        return key_label(obj.fair_key)

    @admin.display(description="attempts")
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempt} / {obj.max_attempts}"

    @admin.display(description="args")
    def args_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.args)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.metadata)

    @admin.display(description="progress")
    def progress_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.progress)

    @admin.display(description="result")
    def result_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.result)

    # Every time on the page as the attempts table writes its own (admin/timeline.py).
    created_at_shown = time_field("created_at", "created at")
    run_at_shown = time_field("run_at", "run at")
    attempted_at_shown = time_field("attempted_at", "attempted at")
    heartbeat_at_shown = time_field("heartbeat_at", "heartbeat at")
    deadline_at_shown = time_field("deadline_at", "deadline at")
    finalized_at_shown = time_field("finalized_at", "finalized at")

    @admin.display(description="attempts")
    def timeline(self, obj: Job) -> SafeString:
        return attempt_timeline(obj)

    @admin.display(description="error history")
    def errors_pretty(self, obj: Job) -> SafeString:
        errors = obj.errors if isinstance(obj.errors, list) else []
        if not errors:
            return format_html('<span class="awa-muted">{}</span>', "no errors")
        items = []
        for entry in reversed(errors):  # the latest first
            entry = entry if isinstance(entry, dict) else {"error": entry}
            traceback = entry.get("traceback")
            rule = entry.get("rule")  # the kind's retry rule that decided (retry_on, discard_on, backoff)
            items.append(
                (
                    entry.get("attempt", "?"),
                    shown_time(entry.get("at")),
                    entry.get("error", ""),
                    format_html('<div class="awa-muted awa-error-rule">rule: {}</div>', rule) if rule else "",
                    fold_traceback(str(traceback)) if traceback else "",
                )
            )
        rows = format_html_join(
            "",
            '<li class="awa-error"><div><strong>attempt {}</strong> <span class="awa-muted">{}</span></div>'
            '<div class="awa-error-message">{}</div>{}{}</li>',
            items,
        )
        return format_html('<ol class="awa-errors">{}</ol>', rows)

    # --- actions ---

    def _report(self, request: HttpRequest, verb: str, done: int, selected: int, why: str) -> None:
        level = messages.SUCCESS if done else messages.WARNING
        skipped = selected - done
        text = f"{verb} {done} of {selected} selected job(s)."
        if skipped:
            text += f" {skipped} skipped: {why}."
        self.message_user(request, text, level)

    @admin.action(description="Retry selected jobs now (failed or cancelled)", permissions=["change"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        done = retry_jobs(ids)
        why = "only failed or cancelled jobs are retried"
        held = _still_retryable(ids) if done < len(ids) else 0
        if held:
            why += f"; {held} failed or cancelled job(s) kept: {UNIQUE_KEY_HELD}"
        self._report(request, "Retried", done, len(ids), why)

    @admin.action(description="Cancel selected jobs (not yet finished)", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        done = cancel_jobs(ids)
        self._report(request, "Cancelled", done, len(ids), "finished jobs cannot be cancelled")

    # Named as Django's own action, which it replaces: a confirmation that names the workflow steps
    # among the jobs (admin/deleting.py), then the service, without a LogEntry per row.
    @admin.action(description="Delete selected jobs", permissions=["delete"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            hidden = [("action", "delete_selected")]
            hidden += [(ACTION_CHECKBOX_NAME, pk) for pk in request.POST.getlist(ACTION_CHECKBOX_NAME)]
            if request.POST.get("select_across") == "1":
                hidden.append(("select_across", "1"))
            return confirm_delete(self, request, queryset, hidden=hidden)
        ids = list(queryset.values_list("pk", flat=True))
        done = discard_jobs(ids)
        self._report(request, "Deleted", done, len(ids), "already gone")
        return None

    def render_delete_form(self, request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
        job = context.get("object")
        if isinstance(job, Job):  # the job's own Delete page names its workflow, as the action does
            context["awa_impact"] = workflow_impact(Job.objects.filter(pk=job.pk))
        return super().render_delete_form(request, context)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        discard_jobs([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        discard_jobs(list(queryset.values_list("pk", flat=True)))

    # --- the detail page's buttons ---

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        custom = [
            path(
                "<path:object_id>/act/<str:action>/",
                self.admin_site.admin_view(self.act_view),
                name="{}_{}_act".format(*info),
            )
        ]
        return custom + super().get_urls()

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        job_id = parse_id(object_id)
        job = Job.objects.filter(pk=job_id).only("state").first() if job_id is not None else None
        if job is not None:
            can_change = self.has_change_permission(request)
            extra["awa_can_retry"] = can_change and job.state in RETRYABLE_FROM
            extra["awa_can_cancel"] = can_change and job.state not in TERMINAL_STATES
            extra["awa_restart_steps"] = can_change and restart_choices(job)
        return super().change_view(request, object_id, form_url, extra)

    @staticmethod
    def _act(action: str, job_id: int, reason: str = "") -> int:
        if action == "cancel":
            return cancel_jobs([job_id], reason=reason)
        return retry_jobs([job_id])

    def act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        return require_POST(self._act_view)(request, object_id, action)

    def _act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        job_id = parse_id(object_id)
        if action not in ("retry", "cancel", "restart") or job_id is None:
            raise Http404(f"no job {brief(object_id, 40)} with a {brief(action, 40)} button")
        if not self.has_change_permission(request):
            raise PermissionDenied
        job = get_object_or_404(Job.objects.only("pk"), pk=job_id)
        back = HttpResponseRedirect(reverse("admin:awa_job_change", args=[job.pk], current_app=self.admin_site.name))
        if action == "restart":
            self.restart(request, job.pk)
            return back
        reason = request.POST.get("reason", "").replace("\x00", "").strip()
        if action == "cancel":  # who cancelled is always part of the reason
            reason = f"by {request.user.get_username()}" + (f": {reason}" if reason else "")
        done = self._act(action, job.pk, reason)
        if done:
            self.message_user(request, f"Job {job.pk}: {action} done.", messages.SUCCESS)
        elif action == "retry" and _still_retryable([job.pk]):
            self.message_user(request, f"Job {job.pk}: not retried: {UNIQUE_KEY_HELD}.", messages.WARNING)
        else:
            self.message_user(request, f"Job {job.pk}: nothing to {action} in its current state.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:awa_job_change", args=[job.pk], current_app=self.admin_site.name))
