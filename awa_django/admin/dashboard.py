"""The job queue dashboard: its two views (the page, and the JSON it refreshes itself from) and the
data they show, read in six queries through ``awa_django.services``.

``DashboardMixin`` adds the views to the Queue admin, under its URLs (``admin:awa_dashboard``,
``admin:awa_dashboard_data``); whoever may view queues, or jobs, may view the dashboard.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from awa_django import defaults
from awa_django.admin.charts import Chart, build_chart
from awa_django.admin.helpers import COUNT_LIMIT
from awa_django.admin.live import live_json
from awa_django.conf import awa_settings
from awa_django.models import Job, JobState, Queue, WorkerInstance
from awa_django.services.cluster import (
    QueueCapacity,
    default_stale_after,
    global_maximum,
    live_workers,
    mode_label,
    worker_healthy,
    worker_scope,
)
from awa_django.services.stats import Throughput, format_age, queue_stats, throughput

if TYPE_CHECKING:
    _QueueAdminBase = admin.ModelAdmin[Queue]
else:  # ModelAdmin is generic for the type checker only
    _QueueAdminBase = admin.ModelAdmin

REFRESH_SECONDS = 5  # how often the dashboard page asks for fresh data


class DashboardMixin(_QueueAdminBase):
    """The dashboard's views, for the Queue admin."""

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path("dashboard/", self.admin_site.admin_view(self.dashboard_view), name="awa_dashboard"),
            path(
                "dashboard/data/",
                live_json(self.admin_site, self.dashboard_data_view, self.dashboard_data),
                name="awa_dashboard_data",
            ),
        ]
        return custom + super().get_urls()

    def _check_dashboard_permission(self, request: HttpRequest) -> None:
        if self.has_view_permission(request):
            return
        try:
            job_admin = self.admin_site.get_model_admin(Job)
        except NotRegistered:  # a site that shows queues but not jobs
            raise PermissionDenied from None
        if not job_admin.has_view_permission(request):
            raise PermissionDenied

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        self._check_dashboard_permission(request)
        context = {
            **self.admin_site.each_context(request),
            "title": "Job queue dashboard",
            "opts": self.opts,
            "awa_data_url": reverse("admin:awa_dashboard_data", current_app=self.admin_site.name),
            "awa_refresh_seconds": REFRESH_SECONDS,
            **dashboard_context(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/awa/dashboard.html", context)

    def dashboard_data_view(self, request: HttpRequest) -> JsonResponse:
        self._check_dashboard_permission(request)
        return self.dashboard_data(request)

    def dashboard_data(self, request: HttpRequest) -> JsonResponse:
        """The dashboard's JSON, with no permission check (``live_json`` decides who gets here)."""
        context = dashboard_context()
        payload = dashboard_json(context)
        payload["html"] = render_to_string("admin/awa/_dashboard_body.html", context, request=request)
        response = JsonResponse(payload)
        response["Cache-Control"] = "no-store"
        return response


def dashboard_context() -> dict[str, Any]:
    """Everything the dashboard shows, in six queries: workers, queues, counts, the rollup's
    watermark, and throughput (awa_history's minutes plus awa_job's last minute or two)."""
    now = timezone.now()
    workers = live_workers(now=now)
    stats = queue_stats(None, workers=workers, limit=COUNT_LIMIT)
    flow = throughput(60, now=now)
    empty = [0] * flow.minutes
    queues = []
    for name, entry in stats.items():
        series = flow.series.get(name, {})
        completed, failed = series.get(JobState.COMPLETED, empty), series.get(JobState.FAILED, empty)
        queues.append(
            {
                "stats": entry,
                "age": format_age(entry.oldest_available_age(now)),
                "chart": build_chart(completed, failed, flow.start, width=150, height=30, axes=False),
                JobState.COMPLETED: sum(completed),
                JobState.FAILED: sum(failed),
            }
        )
    by_worker: dict[str, list[tuple[str, QueueCapacity]]] = {}
    for name, entry in sorted(stats.items()):
        for capacity in entry.capacities:
            by_worker.setdefault(capacity.worker, []).append((name, capacity))
    current = awa_settings()
    configured = current.GLOBAL_MAX_WORKERS
    return {
        "awa_now": now,
        "awa_queues": queues,
        "awa_workers": [_worker_row(w, now, by_worker.get(str(w), [])) for w in workers],
        "awa_chart": build_chart(flow.total(JobState.COMPLETED), flow.total(JobState.FAILED), flow.start),
        "awa_history_note": history_note(flow),
        "awa_configured_mode": mode_label(
            "hard_reserved" if configured is None else "weighted", current.CAPACITY_SCOPE
        ),
        "awa_configured_global_max": configured,
        "awa_global_max": global_maximum(workers),
        "awa_stale_after": default_stale_after(),
    }


def history_note(flow: Throughput) -> str | None:
    """What the page says when the chart's minutes are not all counted: the rollup never ran (no
    maintenance leader is running), or its watermark stopped (no leader, or a transaction open
    since then, which holds the minutes open: worker/history.py); None when it keeps up."""
    mark = flow.closed_through
    if mark is None:
        return (
            "The history rollup has not run yet (no maintenance leader: start a worker with "
            "python manage.py awa_worker), so the chart counts only the current minute."
        )
    if flow.behind:
        since = timezone.localtime(mark).strftime("%H:%M")
        held = round(defaults.HISTORY_OPEN_TRANSACTION_MAX / 60)
        return (
            f"The history rollup has not closed a minute since {since} (is a maintenance leader running? "
            f"A transaction open since then, for up to {held} minutes, also keeps them open): "
            "the minutes after it show what its last round saw."
        )
    return None


def _worker_row(worker: WorkerInstance, now: datetime, queues: list[tuple[str, QueueCapacity]]) -> dict[str, Any]:
    flags = worker.flags if isinstance(worker.flags, dict) else {}
    return {
        "worker": worker,
        "mode": mode_label(worker.mode, worker_scope(worker)),
        "healthy": worker_healthy(worker),
        "seen_ago": format_age(now - worker.last_seen_at),
        "up_for": format_age(now - worker.started_at),
        "flags": flags,
        "queues": queues,
    }


def dashboard_json(context: dict[str, Any]) -> dict[str, Any]:
    now = context["awa_now"]
    chart: Chart = context["awa_chart"]
    return {
        "generated_at": now.isoformat(),
        "queues": [
            q["stats"].as_dict(now)
            | {"completed_last_hour": q[JobState.COMPLETED], "failed_last_hour": q[JobState.FAILED]}
            for q in context["awa_queues"]
        ],
        "workers": [
            {
                "worker": str(w["worker"]),
                "instance_id": str(w["worker"].instance_id),
                "mode": w["worker"].mode,
                "capacity_scope": worker_scope(w["worker"]),
                "mode_label": w["mode"],
                "global_max_workers": w["worker"].global_max_workers,
                "last_seen_at": w["worker"].last_seen_at.isoformat(),
                "healthy": w["healthy"],
                "flags": w["flags"],
                "queues": {name: cap.as_dict() for name, cap in w["queues"]},
            }
            for w in context["awa_workers"]
        ],
        "last_hour": {JobState.COMPLETED: chart.completed, JobState.FAILED: chart.failed},
        "history_note": context["awa_history_note"],
        "global_max_workers": {
            "configured": context["awa_global_max"].configured,
            "in_force": context["awa_global_max"].in_force,
            "reason": context["awa_global_max"].reason,
        },
    }  # fmt: skip
