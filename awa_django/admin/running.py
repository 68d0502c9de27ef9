""" "Running now": the running jobs per worker and per queue (job, kind, started, elapsed,
progress), as a page and as the JSON it refreshes itself from.

``RunningNowMixin`` adds the two views to the Job admin (``admin:awa_job_running``,
``admin:awa_job_running_data``); whoever may view jobs may view them, and the JSON also answers the metrics token
(``awa_django.admin.live``). ``?worker=host:pid`` and
``?queue=name`` narrow the list; the dashboard's worker and queue rows link here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from awa_django.admin.helpers import job_link
from awa_django.admin.live import live_json
from awa_django.models import Job
from awa_django.services.running import RunningNow, running_now
from awa_django.services.stats import format_age

if TYPE_CHECKING:
    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin

REFRESH_SECONDS = 5
PROGRESS_SHOWN = 120  # characters of a job's progress in its row
FILTER_MAX_LENGTH = 255  # longer than any host:pid or queue name: such a filter matches nothing


def _filter(request: HttpRequest, name: str) -> tuple[str | None, bool]:
    """The ``name`` filter's value (None: not given) and whether it can match nothing (a NUL, or
    longer than any worker or queue name): then the list is empty, never a 500."""
    value = request.GET.get(name, "").strip()
    return value or None, "\x00" in value or len(value) > FILTER_MAX_LENGTH


class RunningNowMixin(_JobAdminBase):
    def get_urls(self) -> list[URLPattern]:
        custom = [
            path("running/", self.admin_site.admin_view(self.running_view), name="awa_job_running"),
            path(
                "running/data/",
                live_json(self.admin_site, self.running_data_view, self.running_data),
                name="awa_job_running_data",
            ),
        ]
        return custom + super().get_urls()

    def _running_context(self, request: HttpRequest, *, checked: bool = True) -> dict[str, Any]:
        if checked and not self.has_view_permission(request):
            raise PermissionDenied
        (worker, odd_worker), (queue, odd_queue) = _filter(request, "worker"), _filter(request, "queue")
        impossible = odd_worker or odd_queue
        found = RunningNow([], False, timezone.now()) if impossible else running_now(worker=worker, queue=queue)
        rows = found.jobs
        shown = {k: v for k, v in (("worker", worker), ("queue", queue)) if v}
        return {
            "awa_now": found.now,
            "awa_rows": rows,
            "awa_tbody": _table_body(rows, found.now, self.admin_site.name),
            "awa_more": found.more and not impossible,
            "awa_worker": worker,
            "awa_queue": queue,
            "awa_query": urlencode(shown),
        }

    def running_view(self, request: HttpRequest) -> HttpResponse:
        context = self._running_context(request)
        data_url = reverse("admin:awa_job_running_data", current_app=self.admin_site.name)
        context.update(
            {
                **self.admin_site.each_context(request),
                "title": "Running now",
                "opts": self.opts,
                "awa_data_url": data_url + (f"?{context['awa_query']}" if context["awa_query"] else ""),
                "awa_refresh_seconds": REFRESH_SECONDS,
            }
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/awa/running/running.html", context)

    def running_data_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self.running_data(request)

    def running_data(self, request: HttpRequest) -> JsonResponse:
        """Running now's JSON, with no permission check (``live_json`` decides who gets here)."""
        context = self._running_context(request, checked=False)
        now = context["awa_now"]
        payload = {
            "generated_at": now.isoformat(),
            "worker": context["awa_worker"],
            "queue": context["awa_queue"],
            "more": context["awa_more"],
            "jobs": [job.as_dict(now) for job in context["awa_rows"]],
            "html": render_to_string("admin/awa/running/_body.html", context, request=request),
        }
        response = JsonResponse(payload)
        response["Cache-Control"] = "no-store"
        return response


def _table_body(jobs: list[Any], now: Any, site: str) -> SafeString:
    """The table's rows, built here rather than by the template: up to RUNNING_LIMIT rows of eight
    cells, each a handful of lookups and filters in a template (tens of milliseconds for 500 rows),
    and a reverse() per row (``job_link`` reverses once)."""
    link = job_link(site)
    muted = format_html('<span class="awa-muted">{}</span>', "—")
    in_process = format_html('<span class="awa-muted">{}</span>', "in-process")
    rows = []
    for job in jobs:
        worker = (
            format_html('<a href="?worker={}">{}</a>', quote(job.worker, safe="/"), job.worker)
            if job.worker
            else in_process
        )
        started = "" if job.started_at is None else timezone.localtime(job.started_at).strftime("%Y-%m-%d %H:%M:%S")
        progress = (
            muted
            if job.progress is None
            else format_html('<code class="awa-progress">{}</code>', Truncator(str(job.progress)).chars(PROGRESS_SHOWN))
        )
        rows.append(
            format_html(
                '<tr data-job="{}">\n        <td><a href="{}">{}</a></td>\n        <td>{}</td>\n'
                '        <td><a href="?queue={}">{}</a></td>\n        <td>{}</td>\n'
                '        <td class="awa-nowrap">{}</td>\n        <td class="awa-nowrap awa-elapsed">{}</td>\n'
                '        <td class="num">{} / {}</td>\n        <td>{}</td>\n      </tr>',
                job.id,
                link(job.id),
                job.id,
                job.kind,
                quote(job.queue, safe="/"),
                job.queue,
                worker,
                started,
                format_age(job.elapsed(now)),
                job.attempt,
                job.max_attempts,
                progress,
            )
        )
    return mark_safe("\n      ".join(rows))  # noqa: S308 (each row built by format_html)
