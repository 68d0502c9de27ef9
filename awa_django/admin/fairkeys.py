"""The fair key overrides admin: one row per fair key whose weight or cap differs from its queue's
defaults (the sidebar says "Fair key overrides": the keys in use need no row, and are on each
queue's keys page, linked from the queue list).

A key needs no row to be used (a job's ``fair_key`` is enough); a row overrides the queue's
``key_weight`` / ``key_max_running`` for that key, and running workers apply it on their next
settings reload (about 2 s). The list shows what is in force: the row's value, or the queue's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from awa_django.admin.helpers import NulSafeChangeList, SafeSelectionMixin
from awa_django.defaults import KEY_WEIGHT_DEFAULT
from awa_django.forms import FairKeyForm, cap_above_slots
from awa_django.models import FairKey, Queue

if TYPE_CHECKING:
    _FairKeyAdminBase = admin.ModelAdmin[FairKey]
else:  # ModelAdmin is generic for the type checker only
    _FairKeyAdminBase = admin.ModelAdmin


def key_label(key: str) -> SafeString:
    """A key as the admin shows it: the default key named, others as typed (escaped)."""
    if not key:
        return format_html('<span class="awa-muted">{}</span>', "(default key)")
    return format_html("<code>{}</code>", key)


class FairKeyChangeList(NulSafeChangeList):
    """Attaches each row's queue defaults (key_weight, key_max_running) after the page is fetched:
    one query for the page's queues."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        found = {
            name: (weight, cap)
            for name, weight, cap in Queue.objects.filter(name__in={row.queue for row in rows}).values_list(
                "name", "key_weight", "key_max_running"
            )
        }
        for row in rows:
            row.awa_defaults = found.get(row.queue, (KEY_WEIGHT_DEFAULT, None))
        self.result_list = rows


def _defaults(obj: FairKey) -> tuple[int, int | None]:
    """The queue's key defaults attached by the change list (one query for a row shown alone)."""
    defaults = getattr(obj, "awa_defaults", None)
    if defaults is None:
        row = Queue.objects.filter(name=obj.queue).values_list("key_weight", "key_max_running").first()
        defaults = row if row is not None else (KEY_WEIGHT_DEFAULT, None)
    return defaults


@admin.register(FairKey)
class FairKeyAdmin(SafeSelectionMixin, _FairKeyAdminBase):
    form = FairKeyForm
    list_display = ("queue", "key_shown", "weight_in_force", "cap_in_force", "updated_at")
    list_display_links = ("queue", "key_shown")
    list_filter = ("queue",)  # a DISTINCT over awa_fair_key: one row per overridden key, never per job
    search_fields = ("key", "queue")
    search_help_text = "A fair key or a queue name (contains)."
    ordering = ("queue", "key")
    fields = ("queue", "key", "weight", "max_running", "updated_at")
    readonly_fields = ("updated_at",)

    class Media:
        css = {"all": ("awa/admin.css",)}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return FairKeyChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[FairKey], search_term: str
    ) -> tuple[QuerySet[FairKey], bool]:
        if "\x00" in search_term:
            return queryset.none(), False  # no key or queue name holds a NUL
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="fair key", ordering="key")
    def key_shown(self, obj: FairKey) -> SafeString:
        return key_label(obj.key)

    @admin.display(description="weight")
    def weight_in_force(self, obj: FairKey) -> str:
        if obj.weight is not None:
            return str(obj.weight)
        return f"{_defaults(obj)[0]} (the queue's)"

    @admin.display(description="max running")
    def cap_in_force(self, obj: FairKey) -> str:
        if obj.max_running is not None:
            return str(obj.max_running)
        cap = _defaults(obj)[1]
        return f"{'unlimited' if cap is None else cap} (the queue's)"

    def save_model(self, request: HttpRequest, obj: FairKey, form: ModelForm[FairKey], change: bool) -> None:
        super().save_model(request, obj, form, change)
        warning = cap_above_slots(obj.max_running, obj.queue)
        if warning is not None:
            self.message_user(request, f"Key {obj.key!r} of queue {obj.queue!r}: {warning}.", messages.WARNING)
