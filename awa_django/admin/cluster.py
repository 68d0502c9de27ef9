"""The cluster view (capacity scope "cluster"): the one global maximum, editable, and each live
worker's part of it: what it holds and wants per queue, the caps the leader published for it and
the ones it applies, and its lease."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join

from awa_django.admin.helpers import SafeListMixin
from awa_django.forms import ClusterSettingsForm
from awa_django.models import ClusterSettings, WorkerCapacity


@admin.register(ClusterSettings)
class ClusterSettingsAdmin(SafeListMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    form = ClusterSettingsForm
    list_display = ("__str__", "global_max_workers", "workers_in_cluster_scope", "effective")
    fields = ("global_max_workers",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not ClusterSettings.objects.exists()  # one row

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="workers in cluster scope")
    def workers_in_cluster_scope(self, obj: ClusterSettings) -> int:
        return WorkerCapacity.objects.count()

    @admin.display(description="in force (smallest of this and the workers' own settings)")
    def effective(self, obj: ClusterSettings) -> str:
        values = {v for v in WorkerCapacity.objects.values_list("global_max_workers", flat=True) if v is not None}
        if obj.global_max_workers is not None:
            values.add(obj.global_max_workers)
        if not values:
            return "none: hard-reserved (each queue's max_workers across the cluster)"
        if len(values) > 1:
            return f"{min(values)} (workers disagree: {sorted(values)}; give them the same GLOBAL_MAX_WORKERS)"
        return str(min(values))


@admin.register(WorkerCapacity)
class WorkerCapacityAdmin(SafeListMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("instance_id", "queues_table", "lease", "reported_at", "planned_at")
    readonly_fields = [f.name for f in WorkerCapacity._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerCapacity]:
        return super().get_queryset(request)

    @admin.display(description="queue: held / wants / cap applied / cap published / floor")
    def queues_table(self, obj: WorkerCapacity) -> str:
        names = sorted(set(obj.use or {}) | set(obj.caps or {}) | set(obj.applied or {}))
        rows = []
        for name in names:
            use = (obj.use or {}).get(name, {})
            rows.append(
                (
                    name,
                    use.get("held", 0),
                    use.get("demand", 0),
                    (obj.applied or {}).get(name, 0),
                    (obj.caps or {}).get(name, 0),
                    (obj.floors or {}).get(name, 0),
                )
            )
        return format_html_join("", "<div>{}: {} / {} / {} / {} / {}</div>", rows)

    @admin.display(description="lease")
    def lease(self, obj: WorkerCapacity) -> str:
        if obj.lease_until is None:
            return "not planned yet"
        left = (obj.lease_until - timezone.now()).total_seconds()
        return f"{left:.1f}s left" if left > 0 else "expired: floor caps only"
