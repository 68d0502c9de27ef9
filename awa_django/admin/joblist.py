"""The job list's ChangeList: its rows' links made once, the search's scope and the id bounds
kept out of the field lookups, and the keyset links of a list too long to count (newest, newer,
older, oldest), which BoundedCountPaginator pages by id (issue 43)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.views.main import ERROR_FLAG, PAGE_VAR, ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest

from awa_django.admin.helpers import job_link
from awa_django.admin.paging import AFTER_VAR, AT_VAR, BEFORE_VAR, BoundedCountPaginator, bound_time, time_order
from awa_django.admin.search import EVERY_STATE_VAR
from awa_django.models import Job


class JobChangeList(ChangeList):
    # Set by get_queryset when a search over every state was narrowed to finished jobs: about how
    # many unfinished jobs were left unsearched, and the link that searches them too.
    awa_unfinished_skipped: int | None = None
    awa_searched_states: list[str] | None = None
    awa_completed_skipped = False  # an error text search over every state left completed jobs out
    awa_every_state_url: str = ""
    awa_newer_url = awa_older_url = awa_newest_url = awa_oldest_url = ""  # set by get_results
    awa_time_order: str | None = None  # the time column a time filter orders the list by (time_order)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each row links its id and kind to the job's page, carrying the list's filters back
        # (``_changelist_filters``). Django builds each link with reverse() and then
        # add_preserved_filters, which resolves the URL again: a fifth of the rendering of a
        # filtered page of 50 rows. The links differ only by the id, so they are made from one
        # reversed URL and the filters encoded once (url_for_result); the filters are taken off
        # ``preserved_filters``, which Django reads only to decorate these links.
        self._awa_link = job_link(self.model_admin.admin_site.name, self.preserved_filters)
        self.preserved_filters = ""
        # The page's keyset bound belongs to this list: its own links are made (get_results), and
        # every other link (a filter's choice, the search form, a sort) starts a list anew from
        # its newest page. Kept, a bound would page another list: a created_at time read as a
        # finalized_at one when the filter changes, or an id far down a list the new filter makes.
        for name in (BEFORE_VAR, AFTER_VAR, AT_VAR):
            self.params.pop(name, None)
            self.filter_params.pop(name, None)

    def url_for_result(self, result: Any) -> str:
        return self._awa_link(result.pk)

    def get_filters_params(self, params: Any = None) -> Any:
        lookup_params = super().get_filters_params(params)
        for name in (EVERY_STATE_VAR, BEFORE_VAR, AFTER_VAR, AT_VAR):  # the search's scope and the page's bound
            lookup_params.pop(name, None)  # ... not field lookups
        return lookup_params

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # A list too long to count is paged by id (BoundedCountPaginator): its links, kept beside
        # the list's filters and search. ``awa_newest_url`` and ``awa_oldest_url`` stay empty where
        # the page already is the newest or the oldest.
        self.awa_newer_url = self.awa_older_url = self.awa_newest_url = self.awa_oldest_url = ""
        paginator = self.paginator
        if not (isinstance(paginator, BoundedCountPaginator) and paginator.awa_by_id and self.multi_page):
            return
        rows = list(self.result_list)
        keyset = paginator.awa_keyset
        has_older = paginator.awa_has_older if keyset else len(rows) == self.list_per_page
        has_newer = paginator.awa_has_newer if keyset else self.page_num > 1
        drop = [BEFORE_VAR, AFTER_VAR, AT_VAR, PAGE_VAR, ERROR_FLAG]
        column = self.awa_time_order

        def bound(name: str, row: Any) -> dict[str, Any]:  # a row's keyset bound: its id (and its time)
            return {name: row.pk, AT_VAR: bound_time(getattr(row, column))} if column else {name: row.pk}

        if rows and has_older:
            self.awa_older_url = self.get_query_string(bound(BEFORE_VAR, rows[-1]), drop)
        if rows and has_newer:
            self.awa_newer_url = self.get_query_string(bound(AFTER_VAR, rows[0]), drop)
        if has_newer:
            self.awa_newest_url = self.get_query_string({}, drop)
        if has_older:
            self.awa_oldest_url = self.get_query_string({AFTER_VAR: 0}, drop)

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        queryset = super().get_queryset(request, exclude_parameters)
        skipped = getattr(request, "awa_unfinished_skipped", None)
        self.awa_completed_skipped = getattr(request, "awa_completed_skipped", False)
        if skipped is not None:
            self.awa_unfinished_skipped = skipped
            self.awa_searched_states = getattr(request, "awa_searched_states", None)
        if skipped is not None or self.awa_completed_skipped:
            self.awa_every_state_url = self.get_query_string({EVERY_STATE_VAR: "1"})
        # Only the listed columns: the JSON columns (args, errors, result…) can be large.
        columns: tuple[str, ...] = getattr(self.model_admin, "list_columns", ())
        # A time filter orders the list by its column, newest first (BoundedCountPaginator pages
        # it by that column and the id), and its rows carry the column for the keyset links.
        self.awa_time_order = time_order(request.GET)
        if self.awa_time_order:
            queryset = queryset.order_by(f"-{self.awa_time_order}", "-id")
            columns = (*columns, self.awa_time_order) if columns else columns
        return queryset.only(*columns) if columns else queryset
