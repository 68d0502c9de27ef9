"""The workers: each live worker's snapshot row, its running jobs, and its controls.

A staff user with the change permission on workers may ask one, from its page, to drain and
stop (SIGTERM's stop) or to stop claiming one queue and resume it
(``awa_django.services.control``). The request is pending until the worker acknowledges it;
the page shows both, and the worker's own flags (draining, held queues). Each request sent is one
``LogEntry``. A refused request (the worker is gone or stopping, a queue it does not serve) is a
message on the page, never a 500. View-only staff see everything and no control.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from awa_django.admin.helpers import SafeListMixin, parse_id
from awa_django.exceptions import WorkerRequestError
from awa_django.models import WorkerAction, WorkerInstance, WorkerRequest
from awa_django.services.cluster import default_stale_after, mode_label, worker_scope
from awa_django.services.control import (
    held_queues,
    pending_requests,
    recent_requests,
    request_drain,
    request_hold,
    request_resume,
)
from awa_django.services.stats import format_age
from awa_django.validation import brief

if TYPE_CHECKING:
    _WorkerAdminBase = admin.ModelAdmin[WorkerInstance]
else:  # ModelAdmin is generic for the type checker only
    _WorkerAdminBase = admin.ModelAdmin

HIDDEN_BUTTONS = {"show_save": False, "show_save_and_continue": False, "show_save_and_add_another": False}


@admin.register(WorkerInstance)
class WorkerInstanceAdmin(SafeListMixin, _WorkerAdminBase):
    list_display = ("__str__", "mode_shown", "state", "queues_shown", "seen", "requests_shown", "running_link")
    readonly_fields = [
        "hostname", "pid", "instance_id", "mode_shown", "state", "queues_shown", "started_at", "last_seen_at",
        "requests_shown", "running_link",
    ]  # fmt: skip
    fields = tuple(readonly_fields)
    change_form_template = "admin/awa/workerinstance/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a worker removes its own row when it stops; stale rows are removed by the leader

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path(
                "<path:object_id>/control/",
                self.admin_site.admin_view(self.control_view),
                name="awa_workerinstance_control",
            )
        ]
        return custom + super().get_urls()

    # --- columns ---------------------------------------------------------------------

    @admin.display(description="mode")
    def mode_shown(self, obj: WorkerInstance) -> str:
        return mode_label(obj.mode, worker_scope(obj))

    @admin.display(description="state")
    def state(self, obj: WorkerInstance) -> str:
        flags = obj.flags if isinstance(obj.flags, dict) else {}
        words = []
        if flags.get("draining"):
            words.append("draining (asked by an operator)")
        elif flags.get("stopping"):
            words.append("stopping")
        held = held_queues(obj)
        if held:
            words.append("holding " + ", ".join(held))
        if flags.get("leader"):
            words.append("maintenance leader")
        age = (timezone.now() - obj.last_seen_at).total_seconds()
        if age > default_stale_after():
            words.insert(0, f"gone (last seen {format_age(timezone.now() - obj.last_seen_at)} ago)")
        return "; ".join(words) or "live"

    @admin.display(description="queues")
    def queues_shown(self, obj: WorkerInstance) -> str:
        queues = obj.queues if isinstance(obj.queues, dict) else {}
        held = set(held_queues(obj))
        rows = [
            (
                name,
                "held" if name in held else "paused" if isinstance(entry, dict) and entry.get("paused") else "claiming",
            )
            for name, entry in sorted(queues.items())
        ]
        return format_html_join(
            " ", '<span class="awa-queue-state" data-queue="{}">{} ({})</span>', ((n, n, s) for n, s in rows)
        )

    @admin.display(description="last seen", ordering="last_seen_at")
    def seen(self, obj: WorkerInstance) -> str:
        return f"{format_age(timezone.now() - obj.last_seen_at)} ago"

    @admin.display(description="pending requests")
    def requests_shown(self, obj: WorkerInstance) -> str:
        pending = pending_requests(obj)
        if not pending:
            return "none"
        return format_html_join(
            "",
            '<div class="awa-pending" data-action="{}" data-queue="{}">{} (asked by {}, {} ago): pending</div>',
            (
                (
                    r.action,
                    r.queue,
                    _request_words(r),
                    r.requested_by or "unknown",
                    format_age(timezone.now() - r.requested_at),
                )
                for r in pending
            ),
        )

    @admin.display(description="running jobs")
    def running_link(self, obj: WorkerInstance) -> str:
        url = reverse("admin:awa_job_running", current_app=self.admin_site.name)
        return format_html('<a href="{}?{}">running now</a>', url, urlencode({"worker": str(obj)}))

    # --- the page and the control ----------------------------------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context: dict[str, Any] = {**HIDDEN_BUTTONS, **(extra_context or {})}
        worker = self._worker(object_id)
        if worker is not None:
            queues = sorted(worker.queues) if isinstance(worker.queues, dict) else []
            held = set(held_queues(worker))
            context.update(
                {
                    "title": f"Worker {worker}",
                    "awa_can_control": self.has_change_permission(request, worker),
                    "awa_control_url": reverse(
                        "admin:awa_workerinstance_control", args=[worker.pk], current_app=self.admin_site.name
                    ),
                    "awa_queue_rows": [(name, name in held) for name in queues],
                    "awa_requests": recent_requests(worker),
                }
            )
        return super().change_view(request, object_id, form_url, context)

    def _worker(self, object_id: str) -> WorkerInstance | None:
        pk = parse_id(object_id)
        return None if pk is None else WorkerInstance.objects.filter(pk=pk).first()

    def control_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        worker = self._worker(object_id)
        if not self.has_change_permission(request, worker):
            raise PermissionDenied
        changelist = reverse("admin:awa_workerinstance_changelist", current_app=self.admin_site.name)
        if worker is None:
            self.message_user(
                request,
                f"Nothing sent: worker #{brief(object_id, 40)} is gone (it stopped and removed its row, or was "
                "removed as stale).",
                messages.ERROR,
            )
            return HttpResponseRedirect(changelist)
        back = reverse("admin:awa_workerinstance_change", args=[worker.pk], current_app=self.admin_site.name)
        action, queue = request.POST.get("action", ""), request.POST.get("queue", "").strip()
        who = request.user.get_username()
        try:
            if action == WorkerAction.DRAIN:
                sent = request_drain(worker, requested_by=who)
            elif action == WorkerAction.HOLD:
                sent = request_hold(worker, queue, requested_by=who)
            elif action == WorkerAction.RESUME:
                sent = request_resume(worker, queue, requested_by=who)
            else:
                choices = ", ".join(repr(str(a)) for a in WorkerAction)
                raise WorkerRequestError(str(worker), f"unknown request {brief(action, 40)}; use one of {choices}")
        except WorkerRequestError as exc:
            self.message_user(request, f"Nothing sent: {exc}.", messages.ERROR)
            return HttpResponseRedirect(back)
        self.log_change(request, worker, f"asked {worker} to {_request_words(sent)} (request #{sent.pk})")
        self.message_user(
            request,
            f"Asked {worker} to {_request_words(sent)}; pending until the worker acknowledges it.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(back)


def _request_words(request: WorkerRequest) -> str:
    if request.action == WorkerAction.DRAIN:
        return "drain and stop"
    if request.action == WorkerAction.HOLD:
        return f"stop claiming queue {request.queue!r}"
    return f"claim queue {request.queue!r} again"
