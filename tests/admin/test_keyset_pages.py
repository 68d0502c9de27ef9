"""A job list too long to count (an estimate, or a capped count) is paged by id: following its
"older" links from the newest page, and its "newer" links from the oldest, each visits every
matching job exactly once, in order, whatever the spread of the matches, the page size and the
count's bound; and no page number reaches past the bound of an estimated list (an OFFSET there
would read every row before the page).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import Client
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from awa_django.admin import jobs as jobs_admin
from awa_django.admin.jobs import JobAdmin
from awa_django.admin.paging import BoundedCountPaginator
from awa_django.models import Job

BASE = "/admin/awa/job/"
STATES = ("completed", "failed", "available")
FILTERS = {"none": "", "failed": "state__exact=failed", "failed, q": "state__exact=failed&q=user_id%3D1"}


def analyse_jobs() -> None:
    """The planner's statistics of every table holding jobs, as autovacuum would leave them."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job")
        cursor.execute("SELECT to_regclass('awa_job_done') IS NOT NULL")
        if cursor.fetchone()[0]:
            cursor.execute("ANALYZE awa_job_done")


def walk(client: Client, url: str, link: str) -> tuple[list[int], list[Any]]:
    """The ids of every page reached from ``url`` by following ``link`` ('older' or 'newer'), and
    the change lists seen."""
    ids: list[int] = []
    seen = []
    for _ in range(200):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        cl = response.context["cl"]
        seen.append(cl)
        ids += [job.pk for job in cl.result_list]
        following = getattr(cl, f"awa_{link}_url")
        if not following:
            return ids, seen
        assert following.startswith("?")
        url = BASE + following
    raise AssertionError(f"more than 200 pages following {link} from {url}")


def chunked_newest_first(newest_first: list[int], size: int) -> list[int]:
    """The list's ids (in its order, newest first) as the newer links show them: the oldest
    ``size`` first, each page newest first."""
    rising = newest_first[::-1]
    return [pk for i in range(0, len(rising), size) for pk in reversed(rising[i : i + size])]


def bound_the_count(monkeypatch: pytest.MonkeyPatch, data: st.DataObject, matches: int, per_page: int) -> int:
    """Page size ``per_page``, and the count's bound drawn below the ``matches`` (so the list is
    estimated or capped) and at least a page (as in the console: 10,000 and 50). A search reads its
    matches' ids when they are fewer than its own bound, also drawn: that bound, returned."""
    limit = data.draw(st.integers(per_page, matches - 1), label="count bound")
    search_limit = data.draw(st.sampled_from([limit, 1_000]), label="search's count bound")
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", limit)
    monkeypatch.setattr(jobs_admin, "SEARCH_COUNT_LIMIT", search_limit)
    monkeypatch.setattr(JobAdmin, "list_per_page", per_page)
    return search_limit


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(st.tuples(st.sampled_from(STATES), st.booleans()), min_size=2, max_size=40),
    per_page=st.integers(1, 4),
    name=st.sampled_from(sorted(FILTERS)),
    data=st.data(),
)
def test_older_and_newer_links__visit_every_match_once_in_order(
    admin_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    jobs: list[tuple[str, bool]],
    per_page: int,
    name: str,
    data: st.DataObject,
) -> None:
    Job.objects.all().delete()
    Job.objects.bulk_create(Job(kind="k", state=state, args={"user_id": int(hit)}) for state, hit in jobs)
    analyse_jobs()
    query = FILTERS[name]
    matching = Job.objects.all()
    if "failed" in query:
        matching = matching.filter(state="failed")
    if "user_id" in query:
        matching = matching.filter(args__user_id=1)
    expected = list(matching.order_by("-id").values_list("pk", flat=True))
    assume(len(expected) > per_page)
    # A search counted whole (under its own bound) is paged by id only from a page's id bound (the
    # walk starts with one).
    search_limit = bound_the_count(monkeypatch, data, len(expected), per_page)
    counted_whole = "q=" in query and search_limit == 1_000
    start = f"{BASE}?{query}" + (f"&before={2**62}" if counted_whole else "")

    older, pages = walk(admin_client, start, "older")
    newer, _ = walk(admin_client, f"{BASE}?{query}&after=0", "newer")

    assert older == expected
    assert newer == chunked_newest_first(expected, per_page)
    assert all(cl.paginator.awa_by_id for cl in pages), "a list past its count's bound is paged by id"


@pytest.mark.django_db
def test_each_page_is_newest_first_and_newer_pages_come_in_order(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    Job.objects.bulk_create(Job(kind="k", state="completed") for _ in range(10))
    analyse_jobs()
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", 3)
    monkeypatch.setattr(JobAdmin, "list_per_page", 4)
    ids = list(Job.objects.order_by("id").values_list("pk", flat=True))
    url, pages = f"{BASE}?after=0", []
    while url:
        cl = admin_client.get(url).context["cl"]
        pages.append([job.pk for job in cl.result_list])
        url = BASE + cl.awa_newer_url if cl.awa_newer_url else ""
    # The oldest page holds the oldest four, the next the four after them, the newest the rest:
    # each newest first.
    assert pages == [ids[3::-1], ids[7:3:-1], ids[9:7:-1]]
    last = admin_client.get(f"{BASE}?before={ids[0]}").context["cl"]
    assert list(last.result_list) == [] and not last.awa_older_url


@pytest.mark.django_db
def test_an_estimated_list__refuses_page_numbers_past_the_bound_and_shows_id_links(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    Job.objects.bulk_create(Job(kind="k", state="completed") for _ in range(30))
    analyse_jobs()
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", 10)
    monkeypatch.setattr(JobAdmin, "list_per_page", 5)
    first = admin_client.get(BASE)
    cl = first.context["cl"]
    assert cl.paginator.awa_estimated and cl.result_count >= 30
    html = first.content.decode()
    assert 'class="awa-older"' in html and 'class="awa-oldest"' in html and 'class="awa-newer"' not in html
    assert admin_client.get(f"{BASE}?p=3").status_code == 200  # an OFFSET of 10 rows: within the bound
    refused = admin_client.get(f"{BASE}?p=4")  # 15 rows: past it
    assert refused.status_code == 302 and refused["Location"].endswith("?e=1")


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["x", "-1", "9" * 30, "1.5"])
def test_a_bound_that_is_no_job_id__is_a_bad_lookup(admin_client: Client, value: str) -> None:
    Job.objects.bulk_create(Job(kind="k", state="completed") for _ in range(3))
    for name in ("before", "after"):
        refused = admin_client.get(BASE, {name: value})
        assert refused.status_code == 302 and refused["Location"].endswith("?e=1"), (name, value)


TIME_SLOTS = 5  # the jobs' times: a few, so that many share one (the keyset's tie, settled by id)


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(
        st.tuples(st.sampled_from(STATES), st.integers(0, TIME_SLOTS - 1), st.booleans()), min_size=2, max_size=40
    ),
    per_page=st.integers(1, 4),
    column=st.sampled_from(["created_at", "finalized_at"]),
    span=st.tuples(st.integers(0, TIME_SLOTS - 1), st.integers(1, TIME_SLOTS)),
    search=st.booleans(),
    data=st.data(),
)
def test_a_time_filter__orders_by_its_column_then_id_and_the_links_visit_every_match_once(
    admin_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    jobs: list[tuple[str, int, bool]],
    per_page: int,
    column: str,
    span: tuple[int, int],
    search: bool,
    data: st.DataObject,
) -> None:
    # Times and ids disagree on purpose: the slots are drawn, not rising with the ids.
    base = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)
    Job.objects.all().delete()
    Job.objects.bulk_create(
        Job(
            kind="k",
            state=state,
            args={"user_id": int(hit)},
            created_at=base + timedelta(seconds=slot),
            finalized_at=None if state == "available" else base + timedelta(seconds=slot),
        )
        for state, slot, hit in jobs
    )
    analyse_jobs()
    low, width = span
    since, until = base + timedelta(seconds=low), base + timedelta(seconds=low + width)
    matching = Job.objects.filter(**{f"{column}__gte": since, f"{column}__lt": until})
    query = urlencode({f"{column}__gte": since.isoformat(), f"{column}__lt": until.isoformat()})
    if search:
        matching = matching.filter(args__user_id=1)
        query += "&q=user_id%3D1"
    expected = list(matching.order_by(f"-{column}", "-id").values_list("pk", flat=True))
    assume(len(expected) > per_page)
    search_limit = bound_the_count(monkeypatch, data, len(expected), per_page)
    # A search counted whole is paged by number; a keyset bound past every match pages it by key.
    counted_whole = search and search_limit == 1_000
    top = urlencode({"before": 2**62, "at": (base + timedelta(days=1)).isoformat()})
    start = f"{BASE}?{query}" + (f"&{top}" if counted_whole else "")

    older, pages = walk(admin_client, start, "older")
    newer, _ = walk(admin_client, f"{BASE}?{query}&after=0", "newer")

    assert older == expected
    assert newer == chunked_newest_first(expected, per_page)
    assert all(cl.paginator.awa_by_id and cl.awa_time_order == column for cl in pages)
    # A bound made by hand (the id alone) lands where the list's own link (id and time) does.
    if len(pages) > 1:
        by_hand = admin_client.get(f"{BASE}?{query}&before={list(pages[0].result_list)[-1].pk}")
        assert [job.pk for job in by_hand.context["cl"].result_list] == [job.pk for job in pages[1].result_list]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bound", "why"),
    [
        ({"before": "1", "at": "x"}, "not a time"),
        ({"before": "1", "at": "2026-12-05T06:00:00"}, "no UTC offset"),
        ({"before": str(2**40)}, "no such job, no time given"),
    ],
)
def test_a_time_ordered_lists_bad_bound__is_a_bad_lookup(admin_client: Client, bound: dict[str, str], why: str) -> None:
    Job.objects.bulk_create(Job(kind="k", state="completed") for _ in range(3))
    span = {"created_at__gte": "2026-01-01T00:00:00+00:00", "created_at__lt": "2100-01-01T00:00:00+00:00"}
    refused = admin_client.get(BASE, {**span, **bound})
    assert refused.status_code == 302 and refused["Location"].endswith("?e=1"), why


def make_timed_jobs(base: datetime, slots: list[int]) -> list[int]:
    """Completed jobs created (and finished) ``slot`` seconds after ``base``; their ids."""
    made = Job.objects.bulk_create(
        Job(
            kind="k",
            state="completed",
            args={"user_id": 1},
            created_at=base + timedelta(seconds=slot),
            finalized_at=base + timedelta(seconds=slot),
        )
        for slot in slots
    )
    return [job.pk for job in made]


@pytest.mark.django_db
def test_a_search_sorted_oldest_first__shows_its_oldest_matches_first(admin_client: Client) -> None:
    # A search under its count's bound reads its ids newest first; a list sorted by ascending id
    # (the id column's header, ?o=1) must not be paged from them.
    ids = make_timed_jobs(datetime(2026, 12, 5, 6, 0, tzinfo=UTC), [0, 1, 2, 3, 4, 5])
    analyse_jobs()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JobAdmin, "list_per_page", 2)
        ascending = admin_client.get(BASE, {"q": "user_id=1", "o": "1"}).context["cl"]
        descending = admin_client.get(BASE, {"q": "user_id=1", "o": "-1"}).context["cl"]
    assert [job.pk for job in ascending.result_list] == sorted(ids)[:2]
    assert [job.pk for job in descending.result_list] == sorted(ids, reverse=True)[:2]


@pytest.mark.django_db
@pytest.mark.parametrize("use_tz", [True, False])
def test_a_time_filters_links__page_it_whole_with_and_without_time_zone_support(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any, use_tz: bool
) -> None:
    settings.USE_TZ = use_tz
    base = datetime(2026, 12, 5, 6, 0, 0, 123456, tzinfo=UTC if use_tz else None)  # microseconds kept
    ids = make_timed_jobs(base, [0, 0, 1, 2, 2, 2, 3])
    analyse_jobs()
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", 2)
    monkeypatch.setattr(JobAdmin, "list_per_page", 2)
    span = urlencode({"created_at__gte": base.isoformat(), "created_at__lt": (base + timedelta(hours=1)).isoformat()})
    expected = list(Job.objects.filter(pk__in=ids).order_by("-created_at", "-id").values_list("pk", flat=True))

    older, pages = walk(admin_client, f"{BASE}?{span}", "older")

    assert older == expected and len(pages) == 4
    assert all(cl.awa_time_order == "created_at" for cl in pages)


@pytest.mark.django_db
def test_a_bound_time_with_any_utc_offset__is_the_same_instant(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ISO text may carry offsets Postgres refuses (past ±15:59): the bound is read as its instant.
    base = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)
    ids = make_timed_jobs(base, [0, 1, 2, 3])
    analyse_jobs()
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", 1)
    monkeypatch.setattr(JobAdmin, "list_per_page", 1)
    span = {"created_at__gte": base.isoformat(), "created_at__lt": (base + timedelta(hours=1)).isoformat()}
    at = base + timedelta(seconds=2)
    pages = [
        admin_client.get(BASE, {**span, "before": str(ids[2]), "at": text})
        for text in (at.isoformat(), "2026-12-06T02:00:02+20:00", "2026-12-04T14:00:02-16:00")
    ]
    assert [response.status_code for response in pages] == [200, 200, 200]
    assert {tuple(job.pk for job in response.context["cl"].result_list) for response in pages} == {(ids[1],)}


@pytest.mark.django_db
def test_other_links_of_a_keyset_page__start_their_list_at_its_newest_page(admin_client: Client) -> None:
    # A filter's choice, the search form and a sort keep the list's filters but not its page's bound:
    # a created_at time must never be read as a finalized_at one.
    base = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)
    ids = make_timed_jobs(base, [0, 1, 2])
    span = {"created_at__gte": base.isoformat(), "created_at__lt": (base + timedelta(hours=1)).isoformat()}
    response = admin_client.get(BASE, {**span, "before": str(ids[2]), "at": (base + timedelta(seconds=2)).isoformat()})
    cl = response.context["cl"]
    link = cl.get_query_string({"finalized_at__gte": base.isoformat()})
    html = response.content.decode()

    assert "before=" not in link and "at=" not in link and "created_at__gte=" in link
    assert 'name="before"' not in html and 'name="at"' not in html  # the search form's hidden fields
