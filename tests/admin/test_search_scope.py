"""A search over every state on a big backlog: no args or tags index covers unfinished jobs, so
past ``UNFINISHED_SEARCH_LIMIT`` of them (the planner's estimate) the job list asks the finished
states only, says so above the results with a link that searches every state, and a bulk action
pins that scope in its URL so every chunk asks the same jobs. A state filter, an id, a kind or a
key search is never narrowed; error text keeps the retryable jobs (few, in the hot table) and leaves
the completed ones out (no index covers their error text), with a note, whatever the backlog.

The limit is lowered for these tests (the table holds a few thousand rows, analysed, so the
estimate is the planner's real one, not a stub).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from awa_django.admin import jobs as job_admin
from awa_django.admin.search import EVERY_STATE_VAR, estimated_unfinished_jobs, indexed_search
from awa_django.models import Job
from awa_django.states import JobState

BACKLOG = 3000
LIMIT = 1000


@pytest.mark.parametrize(
    ("term", "indexed"),
    [
        ("user_id=5", True),
        ('{"user_id": 5}', True),
        ("{not json", False),
        ("[1, 2]", False),
        ("tag:red", True),
        ("error:timeout", True),
        ("tag:red user_id=5 error:x", True),
        ("123", False),
        ("#123", False),
        ("send_email", False),
        ("key:tenant:1", False),
        ("tag:red key:t", False),
        ("error:", False),
        ("", False),
        ("a..b=1", False),
        ("x\x00=1", False),
    ],
)
def test_indexed_search__args_tags_and_error_text_only(term: str, indexed: bool) -> None:
    assert indexed_search(term) is indexed


@pytest.fixture
def backlog(db: None) -> dict[str, int]:
    """BACKLOG available jobs with nothing searchable, and one job of user 5 in each of several
    states (with an error mentioning "gateway"), the table analysed."""
    now = timezone.now()
    Job.objects.bulk_create(Job(kind="k", args={"user_id": 0}) for _ in range(BACKLOG))
    made = {}
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.AVAILABLE, JobState.RETRYABLE, JobState.RUNNING):
        job = Job.objects.create(
            kind="k",
            state=state,
            args={"user_id": 5},
            tags=["red"],
            errors=[{"error": "gateway down", "attempt": 1}],
            finalized_at=now if state in (JobState.COMPLETED, JobState.FAILED) else None,
        )
        made[str(state)] = job.pk
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job")
    return made


def test_estimate__tracks_the_unfinished_rows(backlog: dict[str, int]) -> None:
    assert 0.8 * BACKLOG <= estimated_unfinished_jobs() <= 1.2 * (BACKLOG + 3)


def _listed(client: Client, **query: str) -> tuple[set[int], str]:
    response = client.get(reverse("admin:awa_job_changelist"), query)
    assert response.status_code == 200, response
    return {job.pk for job in response.context["cl"].result_list}, response.content.decode()


@pytest.fixture
def low_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_admin, "UNFINISHED_SEARCH_LIMIT", LIMIT)


def test_search__past_the_limit_asks_finished_jobs_and_says_so(
    backlog: dict[str, int], low_limit: None, admin_client: Client
) -> None:
    found, page = _listed(admin_client, q="user_id=5")
    assert found == {backlog["completed"], backlog["failed"]}
    assert 'id="awa-search-scope"' in page and "Search every state" in page
    assert "Searched finished jobs only (cancelled, completed, failed)" in page
    _, page = _listed(admin_client, q="error:gateway")
    assert "Searched finished jobs only (cancelled, failed, retryable)" in page
    assert f"{EVERY_STATE_VAR}=1" in page

    every, page = _listed(admin_client, q="user_id=5", **{EVERY_STATE_VAR: "1"})
    assert every == set(backlog.values()) and 'id="awa-search-scope"' not in page

    pinned, page = _listed(admin_client, q="user_id=5", **{EVERY_STATE_VAR: "0"})
    assert pinned == found and 'id="awa-search-scope"' in page


def test_search__under_the_limit_asks_every_state(backlog: dict[str, int], admin_client: Client) -> None:
    found, page = _listed(admin_client, q="tag:red")
    assert found == set(backlog.values()) and 'id="awa-search-scope"' not in page


def test_error_search__under_the_limit_asks_every_state_but_completed_and_says_so(
    backlog: dict[str, int], admin_client: Client
) -> None:
    found, page = _listed(admin_client, q="error:gateway")
    assert found == {backlog[state] for state in ("failed", "available", "retryable", "running")}
    assert 'id="awa-search-scope"' in page and "Searched every state but completed" in page
    every, page = _listed(admin_client, q="error:gateway", **{EVERY_STATE_VAR: "1"})
    assert every == set(backlog.values()) and 'id="awa-search-scope"' not in page
    completed, page = _listed(admin_client, q="error:gateway", state__exact="completed")
    assert completed == {backlog["completed"]} and 'id="awa-search-scope"' not in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"q": "user_id=5", "state__exact": "available"}, {"available"}),  # a state filter: as asked
        ({"q": "error:gateway"}, {"failed", "retryable"}),  # retryable: few and hot; completed: no index
        ({"q": "k", "queue": "default", "state__exact": "running"}, {"running"}),  # a kind: never narrowed
    ],
)
def test_search__state_filters_kinds_and_error_text(
    backlog: dict[str, int], low_limit: None, admin_client: Client, query: dict[str, str], expected: set[str]
) -> None:
    found, _ = _listed(admin_client, **query)
    assert found == {backlog[state] for state in expected}


def _bulk_url(query: dict[str, Any]) -> str:
    return reverse("admin:awa_job_bulk", args=["cancel"]) + "?" + urlencode(query)


def test_bulk__the_preview_pins_the_scope_and_every_chunk_keeps_it(
    backlog: dict[str, int], low_limit: None, admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    preview = admin_client.get(_bulk_url({"q": "user_id=5"}))
    assert preview.status_code == 302
    assert preview["Location"].endswith("?" + urlencode({"q": "user_id=5", EVERY_STATE_VAR: "0"}))
    page = admin_client.get(preview["Location"]).content.decode()
    assert 'id="awa-bulk-scope"' in page

    # The backlog's estimate no longer matters once pinned: the run asks finished jobs only.
    monkeypatch.setattr(job_admin, "UNFINISHED_SEARCH_LIMIT", 10**9)
    answer = admin_client.post(preview["Location"], {"after": 0}).json()
    assert answer["finished"] and answer["chunk"] == 2  # the completed and the failed job; neither cancellable
    assert Job.objects.get(pk=backlog["available"]).state == JobState.AVAILABLE

    every = admin_client.get(_bulk_url({"q": "user_id=5"}))
    assert every["Location"].endswith("?" + urlencode({"q": "user_id=5", EVERY_STATE_VAR: "1"}))
    admin_client.post(every["Location"], {"after": 0})
    assert Job.objects.get(pk=backlog["available"]).state == JobState.CANCELLED
