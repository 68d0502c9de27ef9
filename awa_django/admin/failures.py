"""Failure triage in the Job admin (``admin:awa_job_failures``): the latest failed jobs grouped
by kind and error signature (``awa_django.services.failures``), each group with its count, first
and last seen, an example, a link to its jobs, and "retry this group" / "delete this group".

A group action reads the groups again, takes the group's ids (the failed jobs of the window that
still carry that signature) and hands them to the services in chunks, with ``skip_locked``, each
chunk one ``LogEntry``. A delete first shows a confirmation that names the workflow steps among
the group's jobs (``admin/deleting.py``). Viewing needs the job view permission; retry the change
permission; delete the delete permission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from awa_django.admin.bulk import CHUNK
from awa_django.admin.deleting import confirm_delete
from awa_django.models import Job
from awa_django.services.failures import WINDOW, failure_groups
from awa_django.services.jobs import discard_jobs, retry_jobs
from awa_django.validation import brief

if TYPE_CHECKING:
    _JobAdminBase = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _JobAdminBase = admin.ModelAdmin


class FailuresMixin(_JobAdminBase):
    def get_urls(self) -> list[URLPattern]:
        custom = [
            path("failures/", self.admin_site.admin_view(self.failures_view), name="awa_job_failures"),
            path(
                "failures/act/",
                self.admin_site.admin_view(require_POST(self.failures_act_view)),
                name="awa_job_failures_act",
            ),
        ]
        return custom + super().get_urls()

    def failures_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        triage = failure_groups()
        request.current_app = self.admin_site.name
        context = {
            **self.admin_site.each_context(request),
            "title": "Failures by kind and error",
            "opts": self.opts,
            "awa_triage": triage,
            "awa_window": WINDOW,
            "awa_can_retry": self.has_change_permission(request),
            "awa_can_delete": self.has_delete_permission(request),
        }
        return TemplateResponse(request, "admin/awa/job/failures.html", context)

    def failures_act_view(self, request: HttpRequest) -> HttpResponse:
        action, key = request.POST.get("action", ""), request.POST.get("group", "")
        if action == "retry":
            allowed, service, flag = self.has_change_permission(request), retry_jobs, CHANGE
        elif action == "delete":
            allowed, service, flag = self.has_delete_permission(request), discard_jobs, DELETION
        else:
            raise PermissionDenied(f"no group action {brief(action, 40)}; use retry or delete")
        if not allowed:
            raise PermissionDenied
        back = HttpResponseRedirect(reverse("admin:awa_job_failures", current_app=self.admin_site.name))
        group = next((g for g in failure_groups().groups if g.key == key), None)
        if group is None:
            self.message_user(request, "That failure group is gone (already retried or deleted?).", messages.WARNING)
            return back
        if action == "delete" and request.POST.get("post") != "yes":
            return confirm_delete(
                self,
                request,
                Job.objects.filter(pk__in=group.ids),
                hidden=[("group", key), ("action", action)],
                post_url=request.path,
                what=f"the failure group {group.kind}: {group.exception} {group.message}"[:200],
            )
        done = 0
        content_type = ContentType.objects.get_for_model(Job).pk
        label = f"{group.kind}: {group.exception} {group.message}"[:150]
        for start in range(0, len(group.ids), CHUNK):
            ids = sorted(group.ids[start : start + CHUNK])
            changed = service(ids, skip_locked=True)
            done += changed
            LogEntry.objects.create(
                user_id=int(request.user.pk or 0),
                content_type_id=content_type,
                object_id=None,
                object_repr=f"failure group {action}: {label}"[:200],
                action_flag=flag,
                change_message=f"{action} failure group {label}: {changed} of {len(ids)} job(s), "
                f"ids {ids[0]} to {ids[-1]}",
            )
        self.message_user(
            request, f"{action.capitalize()}: {done} of {group.count} job(s) of {label}.", messages.SUCCESS
        )
        return back
