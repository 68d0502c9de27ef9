"""What the app's admins share: ids read safely from URLs and selections, JSON shown as
text, and the console's query budget. The job list's paging is in ``admin.paging``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import IGNORED_PARAMS, ChangeList
from django.core.exceptions import ValidationError
from django.db import connections, models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from awa_django.conf import awa_settings
from awa_django.services.db import database_alias
from awa_django.services.stats import COUNT_LIMIT as COUNT_LIMIT  # the admin's modules read the bound here
from awa_django.storable import UnreadableJson
from awa_django.validation import brief

# A filtered job list counts at most COUNT_LIMIT rows ("10,000+" beyond), as the queue counts do.
# A search (any term but an id) counts at most this many: every match costs a heap page (args, tag
# and error text through a GIN index, which cannot count alone) or more (a kind or key search has
# no index: a kind among 40 reads 40 rows a match); a filter counts index entries.
SEARCH_COUNT_LIMIT = 1_000

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


def selectable(model: type[models.Model], value: str) -> bool:
    """Whether ``value`` could be the primary key of a row of ``model``: an integer key read by
    ``parse_id``, any other (a UUID) by its field, a NUL never (Postgres refuses it in text)."""
    pk = model._meta.pk
    if isinstance(pk, models.IntegerField):
        return parse_id(value) is not None
    if "\x00" in value or pk is None:
        return False
    try:
        pk.to_python(value)
    except ValidationError:
        return False
    return True


class SafeSelectionMixin:
    """Admin actions refuse a selection holding an id no row can have, with a message, before
    Django filters by it (``pk__in=["²"]`` raises ValueError; a NUL aborts the query)."""

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        bad = [value for value in selected if not selectable(queryset.model, value)]
        if bad:
            self.message_user(  # type: ignore[attr-defined]
                request,
                f"No action taken: {brief(bad, 80)} is not a valid id; select rows from the list.",  # noqa: S608
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)  # type: ignore[misc,no-any-return]


class NulSafeChangeList(ChangeList):
    """A change list whose filter values holding a NUL are a bad query string (the page redirects
    to ``?e=1``), never a 500: Postgres refuses a NUL in a text value, and no stored field has one."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        filters = [values for name, values in self.filter_params.items() if name not in IGNORED_PARAMS]
        if any("\x00" in value for values in filters for value in values):
            raise IncorrectLookupParameters("a filter value holds a NUL byte, which no stored field can")
        return super().get_queryset(request, exclude_parameters)


class SafeListMixin(SafeSelectionMixin):
    """What every admin of the app's lists needs: actions that refuse ids no row can have
    (``SafeSelectionMixin``) and filters that refuse a NUL (``NulSafeChangeList``)."""

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return NulSafeChangeList


def job_link(site_name: str, query: str = "") -> Callable[[int], str]:
    """Job id → the URL of its admin page (``?query`` appended when given), from one reverse():
    a page of rows needs no reverse() per row (ids are all that differ)."""
    head, _, tail = reverse("admin:awa_job_change", args=[0], current_app=site_name).rpartition("/0/")
    before, after = f"{head}/", f"/{tail}" + (f"?{query}" if query else "")
    return lambda job_id: f"{before}{int(job_id)}{after}"


def pretty_json(value: Any) -> SafeString:
    if value is None or value == {} or value == []:
        return format_html('<span class="awa-muted">{}</span>', "—" if value is None else json.dumps(value))
    too_deep = format_html('<span class="awa-muted">{}</span>', "JSON nested too deeply to show here")
    if isinstance(value, UnreadableJson):  # nested past what Python reads (written past enqueue's checks)
        return too_deep
    try:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except RecursionError:  # readable, but past what the indenting encoder recurses
        return too_deep
    return format_html('<pre class="awa-pre">{}</pre>', text)


POSTGRES_MAX_TIMEOUT_MS = 2_147_483_647


@contextmanager
def query_budget() -> Iterator[float]:
    """A transaction on the jobs' database in which each statement may run ``ADMIN_QUERY_TIMEOUT``
    seconds at most (``statement_timeout``, set for this transaction only, so a pooler in
    transaction mode hands no other client the setting). Yields the budget in seconds. A statement
    past it raises OperationalError caused by ``QueryCanceled`` (``stopped_by_budget``)."""
    seconds = awa_settings().ADMIN_QUERY_TIMEOUT
    alias = database_alias()
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            # Postgres takes at most INT_MAX milliseconds (24.8 days): a longer budget is that, not an error.
            milliseconds = min(max(1, round(seconds * 1000)), POSTGRES_MAX_TIMEOUT_MS)
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{milliseconds}ms"])
        yield seconds


def stopped_by_budget(error: BaseException) -> bool:
    """Whether ``error`` is a statement the database cancelled (a timeout: ours, or the server's own)."""
    from psycopg import errors

    return isinstance(error.__cause__, errors.QueryCanceled)
