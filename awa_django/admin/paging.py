"""The job list's paging: a paginator that never counts the whole job table, and the keyset
links of a list too long to count (by id, or by time under a time filter, issue 43)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.core.paginator import EmptyPage, Page, Paginator
from django.db import connections, transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from django.utils.functional import cached_property

from awa_django.services.stats import COUNT_LIMIT, estimated_job_count

# The job list's keyset parameters: ``?before=ID`` is the page of the matching jobs just older than
# ID, ``?after=ID`` the page just newer (``after=0``: the oldest page). Each is one walk of the id
# index from ID, however deep into the history: a page number is an OFFSET, which on an estimated
# list of millions reads every row before the page.
BEFORE_VAR = "before"
AFTER_VAR = "after"
# A list filtered to a span of a time column (the admin's created_at and finalized_at filters) is
# ordered by that column, newest first, then by id, and its keyset bound is the bound row's time
# (``?at=ISO``) with its id: an id order would walk every row newer than the span (at 50 M jobs, an
# hour three hours back: a day's partition, 3 s), where the time order reads the span's own
# entries of the (created_at) and (finalized_at) indexes. finalized_at first when both are given:
# the history is partitioned by it.
AT_VAR = "at"
TIME_ORDERS = ("finalized_at", "created_at")


def time_order(params: Any) -> str | None:
    """The time column a job list filtered to a span of it (``COLUMN__gte`` / ``COLUMN__lt``, as
    Django's DateFieldListFilter asks) is ordered by, or None: the list is ordered by id."""
    for column in TIME_ORDERS:
        if f"{column}__gte" in params or f"{column}__lt" in params:
            return column
    return None


def parse_time(text: str) -> datetime | None:
    """A keyset bound's ``at`` from ISO text, as the database's datetimes are read (``bound_time``),
    or None. With USE_TZ, the text must carry its UTC offset, and the value is taken to UTC (Postgres
    refuses offsets past ±15:59, which ISO text may carry); without it, an aware time is taken to
    the default time zone, as Django stores naive ones."""
    if len(text) > 64:
        return None
    try:
        value = datetime.fromisoformat(text)
        if settings.USE_TZ:
            return value.astimezone(UTC) if value.tzinfo is not None else None
        return timezone.make_naive(value) if value.tzinfo is not None else value
    except (ValueError, OverflowError):  # not ISO; or past datetime's range once moved to UTC
        return None


def bound_time(value: datetime) -> str:
    """A row's time as a keyset bound's ``at`` text: ISO, in UTC with USE_TZ (naive without it)."""
    return (value.astimezone(UTC) if value.tzinfo is not None else value).isoformat()


def _scan_rows(node: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """The rows an EXPLAIN (FORMAT JSON) plan's scans expect: those read from the heap, and those
    read from index entries alone, by table (index-only scans). A scan's own children (a bitmap's
    index scans) are not counted again."""
    kind = str(node.get("Node Type", ""))
    if kind == "Index Only Scan":
        return 0.0, {str(node.get("Relation Name", "")): float(node.get("Plan Rows", 0))}
    if kind.endswith("Scan") and not kind.startswith("Bitmap Index"):
        return float(node.get("Plan Rows", 0)), {}
    heap, index_only = 0.0, dict[str, float]()
    for child in node.get("Plans", ()):
        child_heap, child_index_only = _scan_rows(child)
        heap += child_heap
        for table, rows in child_index_only.items():
            index_only[table] = index_only.get(table, 0.0) + rows
    return heap, index_only


def _sort_share(heap: float, index_only: dict[str, float], visible: dict[str, float], share: float) -> float:
    """What sorting the scans' rows costs per row, against reading each from the heap (1): an
    index-only scan's rows cost ``share`` on the all-visible fraction of their table's pages
    (``visible``, 0 where unknown) and 1 on the rest."""
    scanned = heap + sum(index_only.values())
    if not scanned:
        return 1.0
    weighed = heap + sum(
        rows * (visible.get(table, 0.0) * share + 1 - visible.get(table, 0.0)) for table, rows in index_only.items()
    )
    return weighed / scanned


class BoundedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Never COUNT(*)s the whole table: the planner's estimate when unfiltered, a capped count otherwise.

    ``awa_estimated`` / ``awa_capped`` tell the pagination template which one it shows. Such a list
    is paged by id (``awa_before`` / ``awa_after``, the keyset parameters above) rather than by
    number: a page number's OFFSET past ``awa_limit`` rows is refused (InvalidPage, which the admin
    answers as a bad lookup), since on an estimated list it would read every row before the page.
    """

    awa_limit = COUNT_LIMIT
    awa_before: int | None = None  # the page is the matches just older than this id
    awa_after: int | None = None  # ... or just newer than this one
    awa_order: str | None = None  # a time column the list is ordered by, then by id (time_order)
    awa_at: datetime | None = None  # ... and the bound row's time in it (None with after=0: the oldest)
    awa_has_older = False  # set by a keyset page: more matches lie past its oldest row
    awa_has_newer = False  # ... or past its newest
    WINDOW_SPARE = 2  # the window holds twice the ids an even spread of the matches would need
    WINDOW_MAX = 250_000  # ids: a few thousand heap pages walked at most before the plain query
    SORT_MAX = 250_000  # expected matches a capped page sorts rather than walks to (an hour at 70 jobs/s)
    # ... each read from an index entry alone (Index Only Scan: a time filter, migration 0026's
    # (finalized_at) and (created_at) INCLUDE (id)) counting as this share of a row read from the
    # heap: 2,000,000 of them, an hour at 550 jobs/s.
    INDEX_ONLY_SHARE = 1 / 8
    awa_estimated = False
    awa_capped = False
    awa_read_ids = False  # count a search by reading its ids (JobAdmin.get_paginator sets it)
    _awa_ids: list[int] | None = None  # the search's matching ids, newest first (by time under a time order)
    _awa_times: list[datetime] | None = None  # ... and their times, under a time order

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where:
            estimate = estimated_job_count()
            if estimate is not None and estimate > self.awa_limit:
                self.awa_estimated = True
                return estimate
        if not (self.awa_read_ids and queryset.query.where):
            counted = int(queryset.order_by()[: self.awa_limit + 1].count())
            self.awa_capped = counted > self.awa_limit
            return counted
        # A search reads its matches' ids rather than counting them (the same scan: each match is
        # read from the table either way), and under the bound its page is then read by those
        # ids (page()), not by running the search again. One row, an array: a list of 10,001 rows
        # would cost the Python side a hundred milliseconds.
        # Under a time order, each id's time too. Both arrays come in the list's order.
        ids: list[int] = []
        times: list[datetime] = []
        columns = ["id", self.awa_order] if self.awa_order else ["id"]
        try:
            sql, params = queryset.order_by().values_list(*columns)[: self.awa_limit + 1].query.sql_with_params()
        except EmptyResultSet:  # a search that can match nothing (queryset.none())
            pass
        else:
            if self.awa_order:
                order = "found.at DESC, found.id DESC"
                select = f"array_agg(found.id ORDER BY {order}), array_agg(found.at ORDER BY {order})"
                names = "found(id, at)"
            else:
                select, names = "array_agg(found.id ORDER BY found.id DESC), NULL", "found(id)"
            with connections[queryset.db].cursor() as cursor:
                cursor.execute(f"SELECT {select} FROM ({sql}) AS {names}", params)  # noqa: S608 (the ORM's SQL)
                found_ids, found_times = cursor.fetchone()
            ids, times = list(found_ids or ()), list(found_times or ())
        self.awa_capped = len(ids) > self.awa_limit
        if not self.awa_capped:
            self._awa_ids = ids
            self._awa_times = times if self.awa_order else None
        return len(ids)

    @property
    def awa_by_id(self) -> bool:
        """The list is paged by id: its count is an estimate or capped, or an id bound was asked."""
        return self.awa_estimated or self.awa_capped or self.awa_keyset

    @property
    def awa_keyset(self) -> bool:
        return self.awa_before is not None or self.awa_after is not None

    def validate_number(self, number: Any) -> int:
        valid = int(super().validate_number(number))
        if self.awa_estimated and (valid - 1) * self.per_page > self.awa_limit:
            raise EmptyPage(
                f"page {valid} is past the first {self.awa_limit} jobs of an estimated list: "
                f"page by id (?{BEFORE_VAR}=ID or ?{AFTER_VAR}=ID) instead"
            )
        return valid

    def page(self, number: Any) -> Page:  # type: ignore[type-arg]
        if self.awa_keyset:
            return self._keyset_page()
        # A search counted under the bound has read every matching id: the page is those of its
        # ids, read by primary key (the search asked again of those rows only: a job that left it
        # since is not shown), not the whole search run again (over every state: twice the time).
        # A filter counted under the bound has counted its matching rows, so the page sorts those:
        # ordered by the bare id, the planner may walk the primary key backwards instead,
        # expecting many matches, and for a few matches that reads the whole table. Capped: the
        # matches are dense, so a walk down from the newest id finds a page early; the page is
        # first asked within a bounded window of the newest ids (see _newest_window), then, if
        # that window holds too few matches, by sorting them where the planner expects few enough
        # (an old hour of a time filter: its index, not a walk down from the newest id through
        # every later row), else as the planner likes.
        # A list in a time order (time_order) is left to the planner: its filter bounds any walk of
        # the time column's index to the span asked.
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and queryset.query.where and self.count:
            newest_first = bool(queryset.query.order_by) and set(queryset.query.order_by) <= {"-id", "-pk"}
            if self._awa_ids is not None and (self.awa_order or newest_first):  # the ids are in this order
                number = self.validate_number(number)
                bottom, top = self._bounds(number)
                return Page(list(queryset.filter(id__in=self._awa_ids[bottom:top])), number, self)
            if newest_first:  # the list's own order (an ascending one, ?o=0, is the planner's)
                if not self.awa_capped:
                    self.object_list = queryset.order_by((F("id") + 0).desc())
                else:
                    number = self.validate_number(number)
                    rows = self._newest_window(queryset, *self._bounds(number))
                    if rows is not None:
                        return Page(rows, number, self)
                    if self._few_to_sort(queryset):
                        ids = self._sorted_ids(queryset, *self._bounds(number))
                        return Page(list(queryset.filter(id__in=ids).order_by("-id")), number, self)
        return super().page(number)

    @staticmethod
    def _sorted_ids(queryset: QuerySet[Any], bottom: int, top: int) -> list[int]:
        """Ids ``bottom:top`` of the matches sorted newest first. The page's rows are then read by
        these ids (the filter asked again of them, as a search's ids are): an index that holds the
        id, as a time filter's does, sorts them from its entries alone (0.2 s for 800,000 matches,
        where sorting whole rows read each from the heap: 0.5 s)."""
        return list(queryset.order_by((F("id") + 0).desc()).values_list("id", flat=True)[bottom:top])

    def _few_to_sort(self, queryset: QuerySet[Any]) -> bool:
        """The planner expects at most SORT_MAX matches (EXPLAIN, no row read): sorting them all
        costs a bounded read through the filter's index, where walking the id index down to
        matches that are not among the newest ids (an hour of last week) reads every newer row.
        Matches the plan reads by index-only scans (the id in the index) count INDEX_ONLY_SHARE
        each where their table's pages are all-visible (sorting them reads no row), and whole
        where they are not (the scan reads the row from the heap there: a table filled since its
        last vacuum)."""
        try:
            sql, params = queryset.order_by().values_list("id", flat=True).query.sql_with_params()
        except EmptyResultSet:
            return True
        with connections[queryset.db].cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan: Any = cursor.fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        top = plan[0]["Plan"]
        heap, index_only = _scan_rows(top)
        visible: dict[str, float] = {}
        if index_only:
            with connections[queryset.db].cursor() as cursor:
                cursor.execute(
                    "SELECT relname, CASE WHEN relpages > 0 THEN least(relallvisible::float8 / relpages, 1) ELSE 1 END "
                    "FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r'",
                    [list(index_only)],
                )
                visible = dict(cursor.fetchall())
        return float(top["Plan Rows"]) * _sort_share(heap, index_only, visible, self.INDEX_ONLY_SHARE) <= self.SORT_MAX

    def _keyset_page(self) -> Page:  # type: ignore[type-arg]
        """The page of ``per_page`` matches just older than ``awa_before`` (or just newer than
        ``awa_after``), newest first, read as page 1 of the list bounded by that id: a walk of the
        id index from the bound (or the ids a search's count read), never an OFFSET. One row more
        than the page is read in the direction of travel, to know whether there is a next page.
        Under a time order the bound is (``awa_at``, the id), and the walk is the time column's."""
        if self.awa_order:
            return self._time_keyset_page()
        queryset: QuerySet[Any] = self.object_list  # type: ignore[assignment]  # the list's queryset
        wanted = self.per_page + 1
        older = self.awa_after is None
        bound = int(self.awa_before if self.awa_after is None else self.awa_after)  # type: ignore[arg-type]
        rows: list[Any] | None = None
        read: int | None = None  # ids read for the page, when its rows are then read by id
        if self._awa_ids is not None:
            ids = [i for i in self._awa_ids if (i < bound if older else i > bound)]
            ids = ids[:wanted] if older else ids[-wanted:]
            rows, read = list(queryset.filter(id__in=ids).order_by("-id")), len(ids)
        elif older:
            # As page(): a filter counted whole is sorted, not walked down the primary key (which, for
            # a few matches, reads the table); a dense one is walked, the capped first in a window,
            # then sorted where the planner expects few matches.
            below = queryset.filter(id__lt=bound)
            newest: Any = "-id"
            if queryset.query.where and not self.awa_capped:
                newest = (F("id") + 0).desc()
            elif queryset.query.where:
                rows = self._newest_window(below, 0, wanted, ceiling=bound - 1)
                if rows is None and self._few_to_sort(below):
                    ids = self._sorted_ids(below, 0, wanted)
                    rows, read = list(below.filter(id__in=ids).order_by("-id")), len(ids)
            if rows is None:
                rows = list(below.order_by(newest)[:wanted])
        else:
            oldest: Any = (F("id") + 0).asc() if queryset.query.where and not self.awa_capped else "id"
            rows = list(queryset.filter(id__gt=bound).order_by(oldest)[:wanted])[::-1]
        return self._keyset_result(rows, read, older, bound > 0)

    def _time_keyset_page(self) -> Page:  # type: ignore[type-arg]
        """_keyset_page under a time order: the matches just before (or after) the key (``awa_at``,
        the bound id) in the order (time, id), read from the time column's index at the key
        (``at <= time`` is its condition; the tie on the time is settled by id), or from the keys
        a search's count read. ``after=0`` without ``at``: from the oldest match."""
        queryset: QuerySet[Any] = self.object_list  # type: ignore[assignment]  # the list's queryset
        column, at = str(self.awa_order), self.awa_at
        wanted = self.per_page + 1
        older = self.awa_after is None
        bound = int(self.awa_before if self.awa_after is None else self.awa_after)  # type: ignore[arg-type]
        read: int | None = None
        if older and at is None:  # resolved by JobAdmin.get_paginator; a bare paginator shows nothing older
            return self._keyset_result([], None, older, True)
        if self._awa_ids is not None:
            keys = list(zip(self._awa_times or (), self._awa_ids, strict=True))
            if older:
                chosen = [key for key in keys if key < (at, bound)][:wanted]
            else:
                chosen = [key for key in keys if at is None or key > (at, bound)][-wanted:]
            ids = [pk for _, pk in chosen]
            rows, read = list(queryset.filter(id__in=ids)), len(ids)
        elif older:
            below = queryset.filter(**{f"{column}__lte": at}).exclude(**{column: at, "id__gte": bound})
            rows = list(below.order_by(f"-{column}", "-id")[:wanted])
        else:
            above = queryset
            if at is not None:
                above = queryset.filter(**{f"{column}__gte": at}).exclude(**{column: at, "id__lte": bound})
            rows = list(above.order_by(column, "id")[:wanted])[::-1]
        return self._keyset_result(rows, read, older, at is not None)

    def _keyset_result(self, rows: list[Any], read: int | None, older: bool, bounded_below: bool) -> Page:  # type: ignore[type-arg]
        """A keyset page of ``rows`` (``per_page`` + 1 asked in the direction of travel), and
        whether pages lie past it either way."""
        # Whether a page lies past this one: from the ids read when the rows were read by id (a row
        # that left the filter between the two reads shortens the page, not the list).
        more = (len(rows) if read is None else read) > self.per_page
        if older:
            self.awa_has_older, self.awa_has_newer = more, True
            rows = rows[: self.per_page]
        else:
            self.awa_has_older, self.awa_has_newer = bounded_below, more
            rows = rows[-self.per_page :] if more else rows
        return Page(rows, 1, self)

    def _bounds(self, number: int) -> tuple[int, int]:
        """Page ``number``'s slice of the rows, as Paginator.page cuts it (orphans, last page)."""
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        return bottom, self.count if top + self.orphans >= self.count else top

    def _newest_window(
        self, queryset: QuerySet[Any], bottom: int, top: int, ceiling: int | None = None
    ) -> list[Any] | None:
        """Rows ``bottom:top`` of a capped filter, read among the newest ids only (at most
        ``ceiling``, when given: a keyset page's bound), or None.

        A capped filter has more matches than the paginator counts. Where its predicate has a GIN
        index (args, tags, error text), the planner, misjudging how many rows match, reads every
        match through the bitmap and sorts them: each match is a heap page, 20,000 of them for a
        common error message on a 10,000,000-row table. Walking the primary key down from the
        newest id stops at the page's last row instead, after about ``top * span / matches`` rows.
        So the page is asked with bitmap and sequential scans priced out, within a window of the
        newest ids: ``WINDOW_SPARE`` times what an even spread of the counted matches (a lower
        bound) would need, at most WINDOW_MAX. When the window holds the whole page, those are
        exactly the page's rows (it holds the newest ids, and the list is in id order); when it
        does not, the caller asks the plain query, the waste bounded by the window.
        """
        connection = connections[queryset.db]
        scans = "SELECT set_config('enable_bitmapscan', %s, true), set_config('enable_seqscan', %s, true)"
        table = connection.ops.quote_name(queryset.model._meta.db_table)
        ends = f"SELECT min(id), max(id), current_setting('enable_bitmapscan'), current_setting('enable_seqscan') FROM {table}"  # noqa: S608, E501
        outer = connection.in_atomic_block
        with transaction.atomic(using=queryset.db, savepoint=False), connection.cursor() as cursor:
            cursor.execute(ends)
            low, high, *before = cursor.fetchone()
            if high is None:
                return None
            if ceiling is not None:
                high = min(high, ceiling)
                if high < low:
                    return []
            floor = high - min(-(-self.WINDOW_SPARE * top * (high - low + 1) // self.count), self.WINDOW_MAX)
            cursor.execute(scans, ["off", "off"])
            try:
                rows = list(queryset.filter(id__gt=floor)[bottom:top])
            finally:  # SET LOCAL lasts to the end of the transaction: an outer one gets back its own
                if outer:
                    cursor.execute(scans, before)
        if len(rows) == top - bottom or floor < low:
            return rows
        return None
