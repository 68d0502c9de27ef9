"""The Job admin's list filters: choices from the registry and the Queue rows (never a DISTINCT
over awa_job), and a value holding a NUL matches nothing instead of failing the query."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from awa_django.models import FairKey, Job, Queue
from awa_django.registry import registry


def has_nul(values: Any) -> bool:
    """Whether a filter value (or a list of them) holds a NUL, which no stored text can contain."""
    if isinstance(values, str):
        return "\x00" in values
    if isinstance(values, list | tuple):
        return any(has_nul(v) for v in values)
    return False


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
        if value and has_nul(value):
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
        if value and has_nul(value):
            return queryset.none()  # no kind holds a NUL
        return queryset.filter(kind=value) if value else queryset


class StateFilter(admin.ChoicesFieldListFilter):
    """Django's choices filter on ``state`` (``?state__exact=failed``), where a value holding a
    NUL matches nothing instead of failing the query."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if any(has_nul(value) for value in self.used_parameters.values()):
            return queryset.none()
        filtered = super().queryset(request, queryset)
        return queryset if filtered is None else filtered


class FairKeyFilter(admin.SimpleListFilter):
    """Choices from the FairKey rows and the default key; never a DISTINCT over awa_job. Any key
    can be asked for by URL (``?fair_key=tenant:42``)."""

    title = "fairness key"
    parameter_name = "fair_key"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        keys = set(FairKey.objects.values_list("key", flat=True)[:200])
        if self.value() is not None:
            keys.add(str(self.value()))
        return [(key, key or "(default key)") for key in sorted(keys)]

    def value(self) -> str | None:
        value = super().value()
        return None if value is None else str(value)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value is None:
            return queryset
        if has_nul(value):
            return queryset.none()  # no key holds a NUL
        return queryset.filter(fair_key=value)
