"""The Job admin's list filters: choices from the registry, the Queue rows and, for the fair key,
a bounded loose index scan of the keys with jobs (never a DISTINCT over awa_job), and a value
holding a NUL matches nothing instead of failing the query."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest

from awa_django.models import FairKey, Job, Queue
from awa_django.registry import registry
from awa_django.services.db import database_alias
from awa_django.services.steps import SLEEPING, WAITING
from awa_django.sql import statements


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


DEFAULT_KEY_LABEL = "(default key)"
KEYS_OFFERED = 100  # (queue, key) pairs read per state (available, running), and override rows


def keys_with_jobs(limit: int = KEYS_OFFERED) -> set[str]:
    """The fair keys of available and running jobs: at most ``limit`` (queue, key) pairs of each
    state, by a loose index scan of their partial indexes (``find_job_keys``), whatever the backlog."""
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["find_job_keys"], {"limit": limit})
        return {key for (key,) in cursor.fetchall()}


class FairKeyFilter(admin.SimpleListFilter):
    """Jobs of one fair key (``?fair_key=tenant:42``; ``?fair_key=`` is the default key). Choices:
    the keys that have available or running jobs (``keys_with_jobs``), the keys of override rows,
    the default key and the value in use; never a DISTINCT over awa_job."""

    title = "fair key"
    parameter_name = "fair_key"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        overrides = set(FairKey.objects.values_list("key", flat=True)[:KEYS_OFFERED])
        keys = keys_with_jobs() | overrides | {""}
        if self.value() is not None:
            keys.add(str(self.value()))
        return [(key, key or DEFAULT_KEY_LABEL) for key in sorted(keys)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value is None:
            return queryset
        if has_nul(value):
            return queryset.none()  # no key holds a NUL
        return queryset.filter(fair_key=value)


class StateFilter(admin.ChoicesFieldListFilter):
    """Django's choices filter on ``state`` (``?state__exact=failed``), where a value holding a
    NUL matches nothing instead of failing the query."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if any(has_nul(value) for value in self.used_parameters.values()):
            return queryset.none()
        filtered = super().queryset(request, queryset)
        return queryset if filtered is None else filtered


class ParkedFilter(admin.SimpleListFilter):
    """Durable jobs parked in a sleep (``?parked=sleeping``) or a wait (``?parked=waiting``), or
    either (``?parked=any``): ``JobQuerySet.sleeping()`` / ``awaiting_event()`` / ``parked()``,
    a probe of awa_job_step's primary key per scheduled or waiting job. Choices need no query; a
    value not among them matches nothing."""

    title = "parked (durable jobs)"
    parameter_name = "parked"
    CHOICES = ((SLEEPING, "sleeping"), (WAITING, "waiting for an event"), ("any", "sleeping or waiting"))

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return list(self.CHOICES)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value is None:
            return queryset
        jobs: Any = queryset  # a JobQuerySet: the admin's queryset is Job.objects'
        if value == SLEEPING:
            return jobs.sleeping()  # type: ignore[no-any-return]
        if value == WAITING:
            return jobs.awaiting_event()  # type: ignore[no-any-return]
        if value == "any":
            return jobs.parked()  # type: ignore[no-any-return]
        return queryset.none()
