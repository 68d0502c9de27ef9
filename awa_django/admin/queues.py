"""The Queue admin: each queue's settings with its live stats (counts from one grouped query per
page, capacity from the live workers' snapshots), pause and resume actions, the dashboard
(``DashboardMixin``), the list's live cells (``live_data``, refreshed by ``awa/live.js``) and
each queue's fair keys page (``keys_view``: the top keys by backlog and by running, with their
share in force), linked from the list's "fair keys" column and from the queue's form."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.admin.dashboard import REFRESH_SECONDS, DashboardMixin
from awa_django.admin.helpers import COUNT_LIMIT, NulSafeChangeList, SafeSelectionMixin
from awa_django.admin.live import live_json
from awa_django.forms import QueueForm
from awa_django.models import JobState, Queue
from awa_django.services.cluster import live_workers
from awa_django.services.keys import KEYS_SHOWN, queue_keys
from awa_django.services.queues import pause_queues, resume_queues
from awa_django.services.stats import COUNTED_STATES, QueueStats, format_age, queue_stats

# The list's columns that change while the page is open: the live view sends these, by queue.
LIVE_COLUMNS = (
    JobState.AVAILABLE, JobState.SCHEDULED, JobState.RUNNING, JobState.FAILED, "oldest_available",
    "mode", "in_flight", "overflow_held",
)  # fmt: skip


class QueueChangeList(NulSafeChangeList):
    """Attaches each row's QueueStats after the page is fetched: one grouped query for the page.
    A filter value holding a NUL is a bad query string (the page redirects to ?e=1, the live view
    answers 400), never a 500 (``NulSafeChangeList``)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        stats = queue_stats(rows, workers=live_workers(), limit=COUNT_LIMIT)
        for row in rows:
            row.awa_stats = stats[row.name]
        self.result_list = rows


def _stats(obj: Queue) -> QueueStats:
    stats = getattr(obj, "awa_stats", None)
    return stats if isinstance(stats, QueueStats) else QueueStats(obj.name)


@admin.register(Queue)
class QueueAdmin(SafeSelectionMixin, DashboardMixin):
    form = QueueForm
    list_display = (
        "name", "paused_badge", "limits", "rate",
        JobState.AVAILABLE, JobState.SCHEDULED, JobState.RUNNING, JobState.FAILED, "oldest_available",
        "mode", "in_flight", "overflow_held", "fair_keys",
    )  # fmt: skip
    list_display_links = ("name",)
    search_fields = ("name",)
    actions = ("pause_selected", "resume_selected")
    change_list_template = "admin/awa/queue/change_list.html"
    readonly_fields = ("live_status", "keys_link", "updated_at")
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
        (
            "Fair keys",
            {
                "fields": ("key_weight", "key_max_running", "keys_link"),
                "description": "Inside the queue, its slots are shared between the fair keys with due jobs, "
                "by weight, each capped at its max running. These are every key's defaults; a fair key "
                "override (its own row) sets either for one key.",
            },
        ),
        ("Live", {"fields": ("live_status", "updated_at")}),
    )

    class Media:
        css = {"all": ("awa/admin.css",)}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueueChangeList

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path("keys/<path:name>/", self.admin_site.admin_view(self.keys_view), name="awa_queue_keys"),
            path("live/", live_json(self.admin_site, self.live_view, self.live_data), name="awa_queue_live"),
        ]
        return custom + super().get_urls()

    def live_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self.live_data(request)

    def live_data(self, request: HttpRequest) -> JsonResponse:
        """The queue list's live cells for the rows the list shows with this query string (its
        filters, search and page), one ChangeList read as the page's: ``{"rows": {name: {column:
        html}}}``, which ``awa/live.js`` puts in the page's cells. No permission check here
        (``live_json`` decides who gets here)."""
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters as exc:  # the page itself redirects such a query to ?e=1
            return JsonResponse({"error": f"the list's filter cannot be read: {exc}; reload the page"}, status=400)
        rows = {
            queue.name: {column: conditional_escape(getattr(self, column)(queue)) for column in LIVE_COLUMNS}
            for queue in changelist.result_list
        }
        queues = [
            _stats(queue).as_dict(timezone.now()) | {"name": queue.name, "paused": queue.paused}
            for queue in changelist.result_list
        ]
        response = JsonResponse({"generated_at": timezone.now().isoformat(), "rows": rows, "queues": queues})
        response["Cache-Control"] = "no-store"
        return response

    def keys_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """One queue's fair keys: the top keys by backlog and by running, each with its weight,
        cap and share in force. Reads one GROUP BY over the two (queue, fair_key) partial indexes."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if "\x00" in name or not name.strip():
            raise Http404("no queue has that name")
        keys = queue_keys(name)
        row = Queue.objects.filter(name=name).only("pk").first()
        site = self.admin_site.name
        context = {
            **self.admin_site.each_context(request),
            "title": f"Fair keys of queue {name}",
            "opts": self.opts,
            "keys": keys,
            "awa_tables": [
                (f"Most available (top {KEYS_SHOWN})", keys.by_backlog),
                (f"Most running (top {KEYS_SHOWN})", keys.by_running),
            ],
            "awa_queue_url": reverse("admin:awa_queue_change", args=[row.pk], current_app=site) if row else None,
            "awa_jobs_url": reverse("admin:awa_job_changelist", current_app=site),
            "awa_fairkeys_url": (
                reverse("admin:awa_fairkey_changelist", current_app=site) + "?" + urlencode({"queue": name})
            ),
        }
        return TemplateResponse(request, "admin/awa/queue/keys.html", context)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Queue], search_term: str
    ) -> tuple[QuerySet[Queue], bool]:
        if "\x00" in search_term:
            return queryset.none(), False  # no queue name holds a NUL
        return super().get_search_results(request, queryset, search_term)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        live = reverse("admin:awa_queue_live", current_app=self.admin_site.name)
        extra = {
            "awa_dashboard_url": reverse("admin:awa_dashboard", current_app=self.admin_site.name),
            "awa_live_url": live + (f"?{request.GET.urlencode()}" if request.GET else ""),
            "awa_refresh_seconds": REFRESH_SECONDS,
        }
        extra.update(extra_context or {})
        return super().changelist_view(request, extra)

    # --- columns ---

    # Not Django's boolean icons: they drew a red ✗ on every queue that is not paused, the normal case.
    @admin.display(description="paused", ordering="paused")
    def paused_badge(self, obj: Queue) -> SafeString:
        if not obj.paused:
            return SafeString("")
        return format_html('<span class="awa-badge awa-badge-paused">{}</span>', "paused")

    @admin.display(description="max / min / weight")
    def limits(self, obj: Queue) -> str:
        return f"{obj.max_workers} / {obj.min_workers} / {obj.weight}"

    @admin.display(description="rate limit")
    def rate(self, obj: Queue) -> str:
        if obj.rate_limit is None:
            return "—"
        burst = f", burst {obj.rate_burst}" if obj.rate_burst else ""
        return f"{obj.rate_limit:g}/s{burst}"

    @admin.display(description=JobState.AVAILABLE)
    def available(self, obj: Queue) -> str:
        return _stats(obj).shown(JobState.AVAILABLE)

    @admin.display(description=JobState.SCHEDULED)
    def scheduled(self, obj: Queue) -> str:
        return _stats(obj).shown(JobState.SCHEDULED)

    @admin.display(description=JobState.RUNNING)
    def running(self, obj: Queue) -> str:
        return _stats(obj).shown(JobState.RUNNING)

    @admin.display(description=JobState.FAILED)
    def failed(self, obj: Queue) -> str:
        return _stats(obj).shown(JobState.FAILED)

    @admin.display(description="oldest available")
    def oldest_available(self, obj: Queue) -> str:
        return format_age(_stats(obj).oldest_available_age())

    @admin.display(description="mode")
    def mode(self, obj: Queue) -> str:
        stats = _stats(obj)
        if stats.modes:
            return "; ".join(stats.mode_labels)
        if stats.waiting_without_worker:  # jobs wait that nobody will run: flag it
            waiting = stats.shown(JobState.AVAILABLE)
            return format_html('<span class="awa-bad">no live worker, {} waiting</span>', waiting)
        return "no live worker"

    @admin.display(description="in flight")
    def in_flight(self, obj: Queue) -> int:
        return _stats(obj).in_flight

    @admin.display(description="overflow held")
    def overflow_held(self, obj: Queue) -> int | str:
        stats = _stats(obj)
        weighted = any(c.type == "Weighted" for c in stats.capacities)  # cluster scope holds caps, not overflow
        return stats.overflow_held if weighted else "—"

    @admin.display(description="fair keys")
    def fair_keys(self, obj: Queue) -> SafeString:
        url = reverse("admin:awa_queue_keys", args=[obj.name], current_app=self.admin_site.name)
        return format_html('<a href="{}" class="awa-keys-link">{}</a>', url, "keys in use")

    @admin.display(description="fair keys in use")
    def keys_link(self, obj: Queue | None) -> SafeString:
        if obj is None or obj.pk is None:
            return format_html('<span class="awa-muted">{}</span>', "saved queues link to their keys here")
        url = reverse("admin:awa_queue_keys", args=[obj.name], current_app=self.admin_site.name)
        return format_html('<a href="{}">{}</a>', url, "the keys with the most backlog and running, and their shares")

    @admin.display(description="live status")
    def live_status(self, obj: Queue | None) -> SafeString:
        if obj is None or obj.pk is None:
            return format_html('<span class="awa-muted">{}</span>', "saved queues show their jobs and workers here")
        stats = queue_stats([obj])[obj.name]
        counts = ", ".join(f"{state} {stats.count(state)}" for state in COUNTED_STATES)
        capacity = format_html_join(
            "", "<div>{}: {} — in flight {}, free permits {}</div>",
            ((c.worker, c.describe(), c.in_flight, c.available) for c in stats.capacities),
        )  # fmt: skip
        return format_html(
            '<div class="awa-live">jobs: {}</div><div>oldest available job: {}</div>{}',
            counts,
            format_age(stats.oldest_available_age()),
            capacity or format_html("<div>{}</div>", "no live worker serves this queue"),
        )

    # --- actions ---

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        names = list(queryset.values_list("name", flat=True))
        done = pause_queues(names)
        self.message_user(request, f"Paused {done} queue(s); {len(names) - done} already paused.", messages.SUCCESS)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        names = list(queryset.values_list("name", flat=True))
        done = resume_queues(names)
        self.message_user(request, f"Resumed {done} queue(s); {len(names) - done} were not paused.", messages.SUCCESS)
