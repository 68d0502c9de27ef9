"""The console's history page in the Job admin (``admin:awa_job_history``): per queue or per kind,
the last 1, 6 or 24 hours at one-minute resolution from the rollup the maintenance leader writes
(``awa_django.services.history``): a table of totals per name, and for the chosen name its
throughput (finished per minute), failure rate, and wait and run p50/p95, drawn with the SVG
charts of ``charts``. Whoever may view jobs may view it.

``?by=queue|kind``, ``?hours=1|6|24`` and ``?name=`` pick what is shown; a value that is none of
those is named on the page and the default used instead, never a 500.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.http import urlencode

from awa_django.admin.charts import build_chart, build_lines
from awa_django.admin.helpers import parse_id
from awa_django.defaults import HISTORY_TOP, NAME_MAX_LENGTH
from awa_django.models import HistoryDimension, HistoryMark, Job
from awa_django.services.db import database_alias
from awa_django.services.history import HOURS_CHOICES, history
from awa_django.validation import brief

if TYPE_CHECKING:
    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin

MINUTES_PER_BAR = {1: 1, 6: 2, 24: 6}  # by the window's hours
DEFAULT_BY = HistoryDimension.QUEUE
DEFAULT_HOURS = 24


def _sums(values: list[int], step: int) -> list[int]:
    return [sum(values[i : i + step]) for i in range(0, len(values), step)]


def _choices(request: HttpRequest) -> tuple[str, int, str | None, list[str]]:
    """The page's (by, hours, name) from the query, and what was ignored, said in words."""
    ignored = []
    by = request.GET.get("by", DEFAULT_BY)
    if by not in HistoryDimension.values:
        ignored.append(f"by={brief(by, 40)} (use queue or kind)")
        by = DEFAULT_BY
    raw_hours = request.GET.get("hours", str(DEFAULT_HOURS))
    hours = parse_id(raw_hours) or 0  # ASCII digits within bigint: int() of 5,000 digits raises
    if hours not in HOURS_CHOICES:
        ignored.append(f"hours={brief(raw_hours, 40)} (use {', '.join(map(str, HOURS_CHOICES))})")
        hours = DEFAULT_HOURS
    name = request.GET.get("name")
    if name is not None and ("\x00" in name or len(name) > NAME_MAX_LENGTH):
        ignored.append(f"name={brief(name, 40)} (no kind or queue has that name)")
        name = None
    return by, hours, name, ignored


class HistoryMixin(_JobAdminBase):
    def get_urls(self) -> list[URLPattern]:
        custom = [path("history/", self.admin_site.admin_view(self.rollup_history_view), name="awa_job_history")]
        return custom + super().get_urls()

    def rollup_history_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        by, hours, name, ignored = _choices(request)
        found = history(by, hours, name)
        mark = HistoryMark.objects.using(database_alias()).filter(pk=1).first()
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": f"History per {by}",
            "opts": self.opts,
            "awa_history": found,
            "awa_by": by,
            "awa_hours": hours,
            "awa_hours_choices": HOURS_CHOICES,
            "awa_dimensions": HistoryDimension.values,
            "awa_ignored": ignored,
            "awa_top": HISTORY_TOP,
            "awa_asked_name": name,
            "awa_rolled_up_to": mark.closed_through if mark else None,
            "awa_rows": [
                {"totals": t, "query": urlencode({"by": by, "hours": str(hours), "name": t.name})} for t in found.totals
            ],
        }
        if found.series is not None:
            series, start = found.series, found.start
            ticks = {1: 10, 6: 60, 24: 180}[hours]
            # Bars are SVG elements the template renders one by one: at most 240 of them (sums of
            # whole minutes, exact); the lines are one element each and keep every minute.
            step = MINUTES_PER_BAR[hours]
            context["awa_minutes_per_bar"] = step
            context["awa_charts"] = {
                "throughput": build_chart(
                    _sums(series.completed, step),
                    _sums(series.failed, step),
                    start,
                    tick_every=ticks // step,
                    minutes_per_bar=step,
                ),
                "failure_rate": build_lines(
                    [("failure rate", "rate", [None if r is None else 100 * r for r in series.failure_rate])],
                    start,
                    unit="%",
                    ceiling=100.0,
                    tick_every=ticks,
                ),
                "wait": build_lines(
                    [("wait p50", "p50", series.wait_p50), ("wait p95", "p95", series.wait_p95)],
                    start,
                    tick_every=ticks,
                ),
                "run": build_lines(
                    [("run p50", "p50", series.run_p50), ("run p95", "p95", series.run_p95)],
                    start,
                    tick_every=ticks,
                ),
            }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/awa/job/history.html", context)
