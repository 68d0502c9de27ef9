"""The admin: Queue settings with live stats, a read-mostly Job admin, and a dashboard
(``awa_django.admin_dashboard``, its charts in ``awa_django.admin_charts``).

Every action calls the service functions in ``awa_django.services`` (the same ones your code
can call). The pages stay fast on a large awa_job table: no full-table COUNT(*), ordering by
the primary key, filters whose choices come from the registry and the Queue rows (never a
DISTINCT over awa_job), counts per queue from one grouped query over the partial indexes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from awa_django import services
from awa_django.admin_dashboard import DashboardMixin
from awa_django.forms import QueueForm
from awa_django.models import TERMINAL_STATES, Job, Queue
from awa_django.registry import registry
from awa_django.validation import brief

if TYPE_CHECKING:
    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin

# A filtered job list counts at most this many rows ("10,000+" beyond).
COUNT_LIMIT = 10_000


# --- helpers ----------------------------------------------------------------------------

BIGINT_MAX = 2**63 - 1


def parse_id(text: str) -> int | None:
    """A primary key from a URL, a search box or a POSTed selection, or None (no row has it).

    ASCII digits only and within bigint: ``str.isdigit()`` is True for "²", which ``int()``
    refuses, and ``int()`` of 5,000 digits raises; neither may turn into a 500.
    """
    if not text or len(text) > 19 or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value <= BIGINT_MAX else None


def _has_nul(values: Any) -> bool:
    """Whether a filter value (or a list of them) holds a NUL, which no stored text can contain."""
    if isinstance(values, str):
        return "\x00" in values
    if isinstance(values, list | tuple):
        return any(_has_nul(v) for v in values)
    return False


class SafeSelectionMixin:
    """Admin actions refuse a selection holding an id no row can have, with a message, before
    Django filters by it (``pk__in=["²"]`` raises ValueError; a NUL aborts the query)."""

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        bad = [value for value in selected if parse_id(value) is None]
        if bad:
            self.message_user(  # type: ignore[attr-defined]
                request,
                f"No action taken: {brief(bad, 80)} is not a valid id; select rows from the list.",  # noqa: S608
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)  # type: ignore[misc,no-any-return]


def _pretty_json(value: Any) -> SafeString:
    if value is None or value == {} or value == []:
        return format_html('<span class="awa-muted">{}</span>', "—" if value is None else json.dumps(value))
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="awa-pre">{}</pre>', text)


class BoundedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Never COUNT(*)s the whole table: the planner's estimate when unfiltered, a capped count otherwise.

    ``awa_estimated`` / ``awa_capped`` tell the pagination template which one it shows.
    """

    awa_limit = COUNT_LIMIT
    awa_estimated = False
    awa_capped = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where:
            estimate = services.estimated_job_count()
            if estimate is not None and estimate > COUNT_LIMIT:
                self.awa_estimated = True
                return estimate
        counted = int(queryset.order_by()[: COUNT_LIMIT + 1].count())
        self.awa_capped = counted > COUNT_LIMIT
        return counted


# --- jobs -------------------------------------------------------------------------------


class QueueNameFilter(admin.SimpleListFilter):
    """Choices from the Queue rows and the registered handlers; never a DISTINCT over awa_job."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        names = set(Queue.objects.values_list("name", flat=True)) | {h.queue for h in registry}
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value and _has_nul(value):
            return queryset.none()  # no queue name holds a NUL
        return queryset.filter(queue=value) if value else queryset


class KindFilter(admin.SimpleListFilter):
    """Choices from the registry (no query)."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        kinds = {h.kind for h in registry}
        if self.value():
            kinds.add(str(self.value()))
        return [(kind, kind) for kind in sorted(kinds)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value and _has_nul(value):
            return queryset.none()  # no kind holds a NUL
        return queryset.filter(kind=value) if value else queryset


class StateFilter(admin.ChoicesFieldListFilter):
    """Django's choices filter on ``state`` (``?state__exact=failed``), where a value holding a
    NUL matches nothing instead of failing the query."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if any(_has_nul(value) for value in self.used_parameters.values()):
            return queryset.none()
        filtered = super().queryset(request, queryset)
        return queryset if filtered is None else filtered


class JobChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        # Only the listed columns: the JSON columns (args, errors, result…) can be large.
        return super().get_queryset(request, exclude_parameters).only(*JobAdmin.list_columns)


@admin.register(Job)
class JobAdmin(SafeSelectionMixin, _JobAdminBase):
    list_columns = ("id", "kind", "queue", "state", "priority", "attempt", "max_attempts", "run_at", "finalized_at")
    list_display = ("id", "kind", "queue", "state_label", "priority", "attempts", "run_at", "finalized_at")
    list_display_links = ("id", "kind")
    list_filter = (("state", StateFilter), QueueNameFilter, KindFilter)
    search_fields = ("kind",)
    search_help_text = "A job id, or a kind (exact)."
    ordering = ("-id",)
    sortable_by = ("id",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts would scan the whole table
    paginator = BoundedCountPaginator
    list_per_page = 50
    actions = ("retry_selected", "cancel_selected", "discard_selected")
    change_form_template = "admin/awa/job/change_form.html"
    change_list_template = "admin/awa/job/change_list.html"
    fieldsets = (
        (None, {"fields": ("id", "kind", "queue", "state_label", "priority", "attempts", "tags")}),
        ("Timing", {"fields": ("created_at", "run_at", "attempted_at", "heartbeat_at", "deadline_at", "finalized_at")}),
        ("Data", {"fields": ("args_pretty", "metadata_pretty", "progress_pretty", "result_pretty")}),
        ("Errors", {"fields": ("errors_pretty",)}),
        ("Uniqueness and lease", {"classes": ("collapse",), "fields": ("unique_key", "unique_states", "run_lease")}),
    )
    readonly_fields = (
        "id", "kind", "queue", "state_label", "priority", "attempts", "tags", "created_at", "run_at",
        "attempted_at", "heartbeat_at", "deadline_at", "finalized_at", "args_pretty", "metadata_pretty",
        "progress_pretty", "result_pretty", "errors_pretty", "unique_key", "unique_states", "run_lease",
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

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes where the actions show (action_location); 5.2 has no such parameter.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location)  # type: ignore[call-arg]
        actions.pop("delete_selected", None)  # discard_selected deletes through the service
        return actions

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip().lstrip("#")
        if not term:
            return queryset, False
        if "\x00" in term:
            return queryset.none(), False  # no kind holds a NUL
        job_id = parse_id(term)
        if job_id is not None:
            return queryset.filter(pk=job_id), False
        if term.isascii() and term.isdigit():
            return queryset.none(), False  # an id beyond bigint
        return queryset.filter(kind=term), False

    # --- columns and detail fields ---

    @admin.display(description="state", ordering="state")
    def state_label(self, obj: Job) -> SafeString:
        return format_html('<span class="awa-state awa-state-{}">{}</span>', obj.state, obj.state)

    @admin.display(description="attempts")
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempt} / {obj.max_attempts}"

    @admin.display(description="args")
    def args_pretty(self, obj: Job) -> SafeString:
        return _pretty_json(obj.args)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Job) -> SafeString:
        return _pretty_json(obj.metadata)

    @admin.display(description="progress")
    def progress_pretty(self, obj: Job) -> SafeString:
        return _pretty_json(obj.progress)

    @admin.display(description="result")
    def result_pretty(self, obj: Job) -> SafeString:
        return _pretty_json(obj.result)

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
                    entry.get("at", ""),
                    entry.get("error", ""),
                    format_html('<div class="awa-muted awa-error-rule">rule: {}</div>', rule) if rule else "",
                    format_html('<pre class="awa-pre awa-traceback">{}</pre>', traceback) if traceback else "",
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
        done = services.retry_jobs(ids)
        self._report(request, "Retried", done, len(ids), "only failed or cancelled jobs are retried")

    @admin.action(description="Cancel selected jobs (not yet finished)", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        done = services.cancel_jobs(ids)
        self._report(request, "Cancelled", done, len(ids), "finished jobs cannot be cancelled")

    @admin.action(description="Discard (delete) selected jobs", permissions=["delete"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        done = services.discard_jobs(ids)
        self._report(request, "Discarded", done, len(ids), "already gone")

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        services.discard_jobs([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        services.discard_jobs(list(queryset.values_list("pk", flat=True)))

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
            extra["awa_can_retry"] = can_change and job.state in services.RETRYABLE_FROM
            extra["awa_can_cancel"] = can_change and job.state not in TERMINAL_STATES
        return super().change_view(request, object_id, form_url, extra)

    @staticmethod
    def _act(action: str, job_id: int) -> int:
        return {"retry": services.retry_jobs, "cancel": services.cancel_jobs}[action]([job_id])

    def act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        return require_POST(self._act_view)(request, object_id, action)

    def _act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        job_id = parse_id(object_id)
        if action not in ("retry", "cancel") or job_id is None:
            raise Http404(f"no job {brief(object_id, 40)} with a {brief(action, 40)} button")
        if not self.has_change_permission(request):
            raise PermissionDenied
        job = get_object_or_404(Job.objects.only("pk"), pk=job_id)
        done = self._act(action, job.pk)
        if done:
            self.message_user(request, f"Job {job.pk}: {action} done.", messages.SUCCESS)
        else:
            self.message_user(request, f"Job {job.pk}: nothing to {action} in its current state.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:awa_job_change", args=[job.pk], current_app=self.admin_site.name))


# --- queues -----------------------------------------------------------------------------


class QueueChangeList(ChangeList):
    """Attaches each row's QueueStats after the page is fetched: one grouped query for the page."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        stats = services.queue_stats(rows, workers=services.live_workers())
        for row in rows:
            row.awa_stats = stats[row.name]
        self.result_list = rows


def _stats(obj: Queue) -> services.QueueStats:
    stats = getattr(obj, "awa_stats", None)
    return stats if isinstance(stats, services.QueueStats) else services.QueueStats(obj.name)


@admin.register(Queue)
class QueueAdmin(SafeSelectionMixin, DashboardMixin):
    form = QueueForm
    list_display = (
        "name", "paused", "limits", "rate", "available", "scheduled", "running", "failed", "oldest_available",
        "mode", "in_flight", "overflow_held",
    )  # fmt: skip
    list_display_links = ("name",)
    search_fields = ("name",)
    actions = ("pause_selected", "resume_selected")
    change_list_template = "admin/awa/queue/change_list.html"
    readonly_fields = ("live_status", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "paused")}),
        (
            "Capacity",
            {
                "fields": ("max_workers", "min_workers", "weight"),
                "description": "Hard-reserved mode (no global maximum) uses max_workers; weighted mode "
                "(AWA['GLOBAL_MAX_WORKERS'] or --global-max-workers) uses min_workers and weight.",
            },
        ),
        ("Rate limit", {"fields": ("rate_limit", "rate_burst")}),
        ("Timing", {"fields": ("deadline", "priority_aging")}),
        ("Live", {"fields": ("live_status", "updated_at")}),
    )

    class Media:
        css = {"all": ("awa/admin.css",)}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueueChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Queue], search_term: str
    ) -> tuple[QuerySet[Queue], bool]:
        if "\x00" in search_term:
            return queryset.none(), False  # no queue name holds a NUL
        return super().get_search_results(request, queryset, search_term)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {"awa_dashboard_url": reverse("admin:awa_dashboard", current_app=self.admin_site.name)}
        extra.update(extra_context or {})
        return super().changelist_view(request, extra)

    # --- columns ---

    @admin.display(description="max / min / weight")
    def limits(self, obj: Queue) -> str:
        return f"{obj.max_workers} / {obj.min_workers} / {obj.weight}"

    @admin.display(description="rate limit")
    def rate(self, obj: Queue) -> str:
        if obj.rate_limit is None:
            return "—"
        burst = f", burst {obj.rate_burst}" if obj.rate_burst else ""
        return f"{obj.rate_limit:g}/s{burst}"

    @admin.display(description="available")
    def available(self, obj: Queue) -> int:
        return _stats(obj).available

    @admin.display(description="scheduled")
    def scheduled(self, obj: Queue) -> int:
        return _stats(obj).scheduled

    @admin.display(description="running")
    def running(self, obj: Queue) -> int:
        return _stats(obj).running

    @admin.display(description="failed")
    def failed(self, obj: Queue) -> int:
        return _stats(obj).failed

    @admin.display(description="oldest available")
    def oldest_available(self, obj: Queue) -> str:
        return services.format_age(_stats(obj).oldest_available_age())

    @admin.display(description="mode")
    def mode(self, obj: Queue) -> str:
        stats = _stats(obj)
        if stats.modes:
            return ", ".join(m.replace("_", "-") for m in stats.modes)
        if stats.waiting_without_worker:  # jobs wait that nobody will run: flag it
            return format_html('<span class="awa-bad">no live worker, {} waiting</span>', stats.available)
        return "no live worker"

    @admin.display(description="in flight")
    def in_flight(self, obj: Queue) -> int:
        return _stats(obj).in_flight

    @admin.display(description="overflow held")
    def overflow_held(self, obj: Queue) -> int | str:
        stats = _stats(obj)
        return stats.overflow_held if "weighted" in stats.modes else "—"

    @admin.display(description="live status")
    def live_status(self, obj: Queue | None) -> SafeString:
        if obj is None or obj.pk is None:
            return format_html('<span class="awa-muted">{}</span>', "saved queues show their jobs and workers here")
        stats = services.queue_stats([obj])[obj.name]
        counts = ", ".join(f"{state} {stats.count(state)}" for state in services.COUNTED_STATES)
        capacity = format_html_join(
            "", "<div>{}: {} — in flight {}, free permits {}</div>",
            ((c.worker, c.describe(), c.in_flight, c.available) for c in stats.capacities),
        )  # fmt: skip
        return format_html(
            '<div class="awa-live">jobs: {}</div><div>oldest available job: {}</div>{}',
            counts,
            services.format_age(stats.oldest_available_age()),
            capacity or format_html("<div>{}</div>", "no live worker serves this queue"),
        )

    # --- actions ---

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        names = list(queryset.values_list("name", flat=True))
        done = services.pause_queues(names)
        self.message_user(request, f"Paused {done} queue(s); {len(names) - done} already paused.", messages.SUCCESS)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        names = list(queryset.values_list("name", flat=True))
        done = services.resume_queues(names)
        self.message_user(request, f"Resumed {done} queue(s); {len(names) - done} were not paused.", messages.SUCCESS)


# The Schedule admin (periodic jobs) and the cluster view (capacity scope "cluster") live in their
# own modules; importing them registers them.
from awa_django import admin_cluster, admin_schedules  # noqa: E402, F401
