"""Act on thousands: retry, cancel or delete every job the Job list's current filter and search
match, not only the page.

``BulkMixin`` adds ``admin:awa_job_bulk`` (``bulk/<action>/?<the list's query string>``):

- GET previews: the filter in words, how many jobs match (counted up to ``COUNT_LIMIT``, the
  planner's estimate past it on an unfiltered list, and said so) and a sample, with a confirm form;
  a delete's preview also names the workflow steps among them (``admin/deleting.py``);
- each POST (the confirmation, then each next chunk) applies the action to the next ``CHUNK`` ids
  of the filter past the cursor, in id order, through the services with ``skip_locked`` (a row a
  worker holds is skipped and counted, never waited for), ``STEP`` ids a transaction; the page
  posts the next chunk by itself until the filter is exhausted, and stopping it (the Stop button,
  or leaving the page) stops the run between chunks;
- after each step the bulk waits twice as long as the step took (``pause_after``, ``apply_paced``;
  the last step's pause is the page's, before it posts the next chunk): the bulk's backend works at
  most a third of the time, in bursts of one short step, so the WAL it writes reaches the workers'
  commits, which flush it with their own, in small pieces, and their pickup keeps its latency
  (bench/bulk_retry.py measures it against the idle tail);
- each chunk is one ``LogEntry`` (who, the action, the filter, how many of how many, the id range).

Retry and cancel need the change permission, delete the delete permission.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from awa_django.admin.deleting import workflow_impact
from awa_django.admin.helpers import COUNT_LIMIT, parse_id
from awa_django.admin.search import EVERY_STATE_VAR, answer_within_budget
from awa_django.models import Job
from awa_django.services.jobs import cancel_jobs, discard_jobs, retry_jobs
from awa_django.validation import brief

if TYPE_CHECKING:
    from django.db.models import QuerySet

    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin

CHUNK = 1000  # ids per request
STEP = 100  # ids per transaction within a chunk, each followed by its pause
PACE = 2.0  # the pause after a step, as a multiple of the step's own time
MAX_PAUSE = 5.0  # seconds: a chunk slowed by a lock or a busy server does not stall the run longer


def pause_after(seconds: float) -> float:
    """How long the bulk waits after a step that took ``seconds`` (the module docstring)."""
    return min(MAX_PAUSE, max(0.0, PACE * seconds))


def apply_paced(service: Callable[..., int], ids: list[int]) -> tuple[int, float]:
    """``service`` over ``ids``, STEP ids a transaction (rows a worker holds skipped), pausing
    ``pause_after`` each step's time between steps. Returns how many it changed, and the pause owed
    after the last step (the page waits it before posting the next chunk)."""
    done = 0
    pause = 0.0
    for start in range(0, len(ids), STEP):
        if pause:
            time.sleep(pause)
        began = time.monotonic()
        done += service(ids[start : start + STEP], skip_locked=True)
        pause = pause_after(time.monotonic() - began)
    return done, pause


SAMPLE = 10

ACTIONS: dict[str, tuple[str, str, Callable[..., int]]] = {
    # action: (verb, permission, service)
    "retry": ("Retry", "change", retry_jobs),
    "cancel": ("Cancel", "change", cancel_jobs),
    "delete": ("Delete", "delete", discard_jobs),
}


def describe_filter(query: str) -> str:
    """The list's query string as the audit log and the preview say it ("everything" when empty)."""
    return brief(query, 500) if query else "every job (no filter)"


def _with_scope(request: HttpRequest, every_state: str) -> str:
    """This page's URL with the search's scope set (``every_state`` "0": finished jobs only)."""
    query = request.GET.copy()
    query[EVERY_STATE_VAR] = every_state
    return f"{request.path}?{query.urlencode()}"


class BulkMixin(_JobAdminBase):
    def get_urls(self) -> list[URLPattern]:
        custom = [path("bulk/<str:action>/", self.admin_site.admin_view(self.bulk_view), name="awa_job_bulk")]
        return custom + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {
            "has_change_permission": self.has_change_permission(request),
            "has_delete_permission": self.has_delete_permission(request),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def _bulk_allowed(self, request: HttpRequest, action: str) -> tuple[str, Callable[..., int]]:
        if action not in ACTIONS:
            raise Http404(f"no bulk action {brief(action, 40)}; use one of {', '.join(ACTIONS)}")
        verb, permission, service = ACTIONS[action]
        allowed = self.has_delete_permission(request) if permission == "delete" else self.has_change_permission(request)
        if not allowed:
            raise PermissionDenied
        return verb, service

    def _filtered(self, request: HttpRequest) -> tuple[QuerySet[Job], str]:
        """The jobs the list's filter and search (this request's query string) match, and the filter."""
        changelist = self.get_changelist_instance(request)
        return changelist.get_queryset(request).order_by(), request.GET.urlencode()

    def bulk_view(self, request: HttpRequest, action: str) -> HttpResponse:
        if request.method == "POST":  # a chunk: bounded by its ids (CHUNK), no budget
            return self._bulk_answer(request, action)
        return answer_within_budget(request, lambda: self._bulk_answer(request, action))

    def _bulk_answer(self, request: HttpRequest, action: str) -> HttpResponse:
        verb, service = self._bulk_allowed(request, action)
        try:
            jobs, query = self._filtered(request)
        except IncorrectLookupParameters:
            return TemplateResponse(
                request,
                "admin/awa/job/bulk.html",
                {**self._bulk_base(request, verb, action, ""), "awa_error": "The list's filter is not valid."},
                status=400,
            )
        scoped = getattr(request, "awa_search_scoped", False)
        if request.method == "GET" and scoped and EVERY_STATE_VAR not in request.GET:
            # The search's scope (finished jobs only, or every state) decided now, by the estimate of
            # unfinished jobs, is pinned in the URL, so every chunk of the run asks the same jobs.
            finished_only = getattr(request, "awa_unfinished_skipped", None) is not None
            return HttpResponseRedirect(_with_scope(request, "0" if finished_only else "1"))
        if request.method == "POST":
            return self._bulk_chunk(request, action, verb, service, jobs, query)
        counted = int(jobs[: COUNT_LIMIT + 1].count())
        sample = list(jobs.order_by("pk").only("id", "kind", "queue", "state", "attempt", "max_attempts")[:SAMPLE])
        context = {
            **self._bulk_base(request, verb, action, query),
            "awa_finished_only": getattr(request, "awa_unfinished_skipped", None) is not None,
            "awa_every_state_url": _with_scope(request, "1"),
            "awa_count": min(counted, COUNT_LIMIT),
            "awa_count_capped": counted > COUNT_LIMIT,
            "awa_sample": sample,
            "awa_chunk": CHUNK,
            "awa_step": STEP,
            "awa_impact": workflow_impact(jobs) if action == "delete" else None,
        }
        return TemplateResponse(request, "admin/awa/job/bulk.html", context)

    def _bulk_base(self, request: HttpRequest, verb: str, action: str, query: str) -> dict[str, Any]:
        request.current_app = self.admin_site.name
        changelist = reverse("admin:awa_job_changelist", current_app=self.admin_site.name)
        return {
            **self.admin_site.each_context(request),
            "title": f"{verb} every job the filter matches",
            "opts": self.opts,
            "awa_action": action,
            "awa_verb": verb,
            "awa_filter": describe_filter(query),
            "awa_query": query,
            "awa_list_url": changelist + (f"?{query}" if query else ""),
        }

    def _bulk_chunk(
        self,
        request: HttpRequest,
        action: str,
        verb: str,
        service: Callable[..., int],
        jobs: QuerySet[Job],
        query: str,
    ) -> JsonResponse:
        after = parse_id(request.POST.get("after", "0") or "0")
        if after is None:
            after = 0
        ids = list(jobs.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:CHUNK])
        done, pause = apply_paced(service, ids)
        if ids:
            LogEntry.objects.create(
                user_id=int(request.user.pk or 0),  # admin_view: a logged-in staff user
                content_type_id=ContentType.objects.get_for_model(Job).pk,
                object_id=None,
                object_repr=brief(f"bulk {action}: {describe_filter(query)}", 200),
                action_flag=DELETION if action == "delete" else CHANGE,
                change_message=f"bulk {action} over {describe_filter(query)}: {verb.lower()} {done} of {len(ids)} "
                f"job(s), ids {ids[0]} to {ids[-1]}",
            )
        return JsonResponse(
            {
                "action": action,
                "filter": describe_filter(query),
                "chunk": len(ids),
                "done": done,
                "skipped": len(ids) - done,
                "after": ids[-1] if ids else after,
                "finished": len(ids) < CHUNK,
                "pause_ms": round(1000 * pause),
            }
        )
