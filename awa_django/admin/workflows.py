"""The Workflow admin: a list of workflows with their jobs' states, and a detail page that draws
the graph as SVG (``awa_django.workflows.layout``), each node linking to its job, with Cancel and
Retry buttons that call ``awa_django.workflows.services`` (the functions your code can call)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from awa_django.admin.helpers import SafeListMixin, parse_id
from awa_django.models import Job, JobEdge, JobState, Workflow
from awa_django.validation import brief
from awa_django.workflows.layout import MAX_NODES, layout
from awa_django.workflows.services import cancel_workflow, retry_workflow

if TYPE_CHECKING:
    _WorkflowAdminBase = admin.ModelAdmin[Workflow]
else:  # ModelAdmin is generic for the type checker only
    _WorkflowAdminBase = admin.ModelAdmin

UNFINISHED = [s for s in JobState if not s.is_terminal]


@admin.register(Workflow)
class WorkflowAdmin(SafeListMixin, _WorkflowAdminBase):
    list_display = ("id", "name", "created_at", "progress")
    list_display_links = ("id", "name")
    search_fields = ("name",)
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50
    change_form_template = "admin/awa/workflow/change_form.html"
    readonly_fields = ("id", "name", "created_at", "metadata")
    fields = readonly_fields

    class Media:
        css = {"all": ("awa/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        if obj is not None:
            return False  # read-only: the buttons act on its jobs
        return super().has_change_permission(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        # The counts read awa_job_workflow_idx for the page's workflows only.
        return (
            super()
            .get_queryset(request)
            .annotate(
                jobs_total=Count("jobs"),
                jobs_completed=Count("jobs", filter=Q(jobs__state=JobState.COMPLETED)),
                jobs_failed=Count("jobs", filter=Q(jobs__state__in=[JobState.FAILED, JobState.CANCELLED])),
            )
        )

    @admin.display(description="jobs")
    def progress(self, obj: Any) -> SafeString:
        return format_html(
            "{} of {} completed, {} failed or cancelled", obj.jobs_completed, obj.jobs_total, obj.jobs_failed
        )

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
        workflow_id = parse_id(object_id)
        if workflow_id is not None:
            extra.update(graph_context(workflow_id, self.admin_site.name))
            extra["awa_can_act"] = self.has_change_permission(request)
        return super().change_view(request, object_id, form_url, extra)

    def act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        return require_POST(self._act_view)(request, object_id, action)

    def _act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        workflow_id = parse_id(object_id)
        if action not in ("retry", "cancel") or workflow_id is None:
            raise Http404(f"no workflow {brief(object_id, 40)} with a {brief(action, 40)} button")
        if not self.has_change_permission(request):
            raise PermissionDenied
        if not Workflow.objects.filter(pk=workflow_id).exists():
            raise Http404(f"no workflow {workflow_id}")
        done = {"retry": retry_workflow, "cancel": cancel_workflow}[action](workflow_id)
        level = messages.SUCCESS if done else messages.WARNING
        self.message_user(request, f"Workflow {workflow_id}: {action}: {done} job(s).", level)
        return HttpResponseRedirect(
            reverse("admin:awa_workflow_change", args=[workflow_id], current_app=self.admin_site.name)
        )


def graph_context(workflow_id: int, site: str) -> dict[str, Any]:
    """The detail page's graph (or, past MAX_NODES jobs, only their counts by state)."""
    jobs = list(
        Job.objects.filter(workflow_id=workflow_id).order_by("pk").values_list("pk", "kind", "state")[: MAX_NODES + 1]
    )
    counts = dict(
        Job.objects.filter(workflow_id=workflow_id)
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    context: dict[str, Any] = {
        "awa_counts": sorted(counts.items()),
        "awa_unfinished": sum(counts.get(s, 0) for s in UNFINISHED),
    }
    if len(jobs) > MAX_NODES:
        context["awa_graph_too_large"] = MAX_NODES
        return context
    ids = [job_id for job_id, _, _ in jobs]
    edges = list(JobEdge.objects.filter(downstream_id__in=ids).values_list("upstream_id", "downstream_id", "policy"))
    graph = layout([(job_id, f"{kind} #{job_id}", state) for job_id, kind, state in jobs], edges)
    context["awa_graph"] = graph
    context["awa_nodes"] = [(n, reverse("admin:awa_job_change", args=[n.id], current_app=site)) for n in graph.nodes]
    return context


def neighbour_links(job: Job, site: str) -> SafeString:
    """The job page's links: its workflow, the jobs it waits for and the jobs that wait for it."""
    ups = list(JobEdge.objects.filter(downstream_id=job.pk).order_by("upstream_id").values_list("upstream_id", "name"))
    downs = list(
        JobEdge.objects.filter(upstream_id=job.pk).order_by("downstream_id").values_list("downstream_id", flat=True)
    )
    if job.workflow_id is None and not ups and not downs:
        return format_html('<span class="awa-muted">{}</span>', "none")

    def job_link(job_id: int, label: str) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:awa_job_change", args=[job_id], current_app=site), label
        )

    parts = []
    if job.workflow_id is not None:
        url = reverse("admin:awa_workflow_change", args=[job.workflow_id], current_app=site)
        parts.append(format_html('workflow <a href="{}">#{}</a>', url, job.workflow_id))
    if ups:
        parts.append(
            format_html("waits for {}", format_html_join(", ", "{}", ((job_link(i, f"{n} #{i}"),) for i, n in ups)))
        )
    if downs:
        parts.append(
            format_html("waited for by {}", format_html_join(", ", "{}", ((job_link(i, f"#{i}"),) for i in downs)))
        )
    if job.state == JobState.WAITING:
        parts.append(format_html("{} upstream edge(s) still open", job.pending))
    return format_html_join(mark_safe("<br>"), "{}", ((p,) for p in parts))
