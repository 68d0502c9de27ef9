"""What the Job and Queue admins share: ids read safely from URLs and selections, JSON shown as
text, and a paginator that never counts the whole awa_job table."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.paginator import Page, Paginator
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from awa_django.services.stats import estimated_job_count
from awa_django.validation import brief

# A filtered job list counts at most this many rows ("10,000+" beyond).
COUNT_LIMIT = 10_000

BIGINT_MAX = 2**63 - 1


def parse_id(text: str) -> int | None:
    """A primary key from a URL, a search box or a POSTed selection, or None (no row has it).

    ASCII digits only and within bigint: ``str.isdigit()`` is True for "²", which ``int()``
    refuses, and ``int()`` of 5,000 digits raises; neither may turn into a 500.
    """
    if not text or len(text) > 19 or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value <= BIGINT_MAX else None


class SafeSelectionMixin:
    """Admin actions refuse a selection holding an id no row can have, with a message, before
    Django filters by it (``pk__in=["²"]`` raises ValueError; a NUL aborts the query)."""

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        bad = [value for value in selected if parse_id(value) is None]
        if bad:
            self.message_user(  # type: ignore[attr-defined]
                request,
                f"No action taken: {brief(bad, 80)} is not a valid id; select rows from the list.",  # noqa: S608
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)  # type: ignore[misc,no-any-return]


def pretty_json(value: Any) -> SafeString:
    if value is None or value == {} or value == []:
        return format_html('<span class="awa-muted">{}</span>', "—" if value is None else json.dumps(value))
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="awa-pre">{}</pre>', text)


class BoundedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Never COUNT(*)s the whole table: the planner's estimate when unfiltered, a capped count otherwise.

    ``awa_estimated`` / ``awa_capped`` tell the pagination template which one it shows.
    """

    awa_limit = COUNT_LIMIT
    awa_estimated = False
    awa_capped = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where:
            estimate = estimated_job_count()
            if estimate is not None and estimate > COUNT_LIMIT:
                self.awa_estimated = True
                return estimate
        counted = int(queryset.order_by()[: COUNT_LIMIT + 1].count())
        self.awa_capped = counted > COUNT_LIMIT
        return counted

    def page(self, number: Any) -> Page:  # type: ignore[type-arg]
        # Counted, not capped: the count has just read every matching row, at most COUNT_LIMIT, so
        # the page sorts those. Ordered by the bare id, the planner may walk the primary key
        # backwards instead, expecting many matches (its guess for jsonb containment is coarse),
        # and for a few matches that reads the whole table. Capped: the matches are dense enough
        # that the walk finds a page early, and stays the planner's choice.
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and queryset.query.where and self.count and not self.awa_capped:
            if queryset.query.order_by and set(queryset.query.order_by) <= {"-id", "-pk"}:  # the list's order
                self.object_list = queryset.order_by((F("id") + 0).desc())
        return super().page(number)
