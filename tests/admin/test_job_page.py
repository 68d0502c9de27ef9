"""The job's page: the attempts table first (above every traceback), every time written one way,
durations under a second in milliseconds, and a job cancelled while a worker ran it keeping its
attempt's start, worker and duration."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timedelta
from html import unescape
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from awa_django.admin.timeline import shown_duration, shown_time
from awa_django.context import JobContext
from awa_django.models import Job, WorkerInstance
from awa_django.registry import JobHandler, Registry
from awa_django.services.stats import format_age
from tests.factories import JobFactory
from tests.harness import make_config, running_worker, wait_until

QUEUE = "jobpage"
TOKYO = ZoneInfo("Asia/Tokyo")
# The one way the page writes a time (admin/timeline.py's shown_time, in the operator's zone).
SHOWN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} JST")


def traceback(n: int) -> str:
    frames = "".join(f'  File "jobs.py", line {i}, in step{i}\n    step{i + 1}()\n' for i in range(40))
    return f"Traceback (most recent call last):\n{frames}ValueError: attempt {n} went wrong\n"


def failed_three_times() -> Job:
    now = timezone.now()
    errors = [
        {
            "error": f"ValueError: attempt {n} went wrong",
            "attempt": n,
            "at": (now - timedelta(minutes=10 - n, milliseconds=-4)).isoformat(),
            "started_at": (now - timedelta(minutes=10 - n)).isoformat(),
            "worker": "box:4242",
            "traceback": traceback(n),
        }
        for n in (1, 2, 3)
    ]
    return JobFactory(
        kind="render",
        queue=QUEUE,
        state="failed",
        attempt=3,
        max_attempts=3,
        created_at=now - timedelta(minutes=11),
        run_at=now - timedelta(minutes=8),
        attempted_at=now - timedelta(minutes=7),
        attempted_by="box:4242",
        finalized_at=now - timedelta(minutes=7) + timedelta(milliseconds=4),
        errors=errors,
    )


def page_of(client: Client, job: Job) -> str:
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        response = client.get(reverse("admin:awa_job_change", args=[job.pk]))
    assert response.status_code == 200
    return str(response.content.decode())


def attempt_cells(html: str) -> dict[str, list[str]]:
    rows = re.findall(r'<tr class="awa-attempt" data-attempt="(\d+)">(.*?)</tr>', html, re.S)
    return {n: [unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)] for n, row in rows}


def visible_text(html: str) -> str:
    main = html[html.index('id="content-main"') :]
    main = re.sub(r"<(script|style)\b.*?</\1>", " ", main, flags=re.S)
    return unescape(re.sub(r"<[^>]+>", " ", main))


@pytest.mark.django_db
def test_job_page__the_attempts_table_comes_before_the_first_traceback(admin_client: Client) -> None:
    html = page_of(admin_client, failed_three_times())

    assert html.count('class="awa-pre awa-traceback"') == 3
    assert html.index('class="awa-table awa-timeline"') < html.index("awa-traceback")
    assert list(attempt_cells(html)) == ["1", "2", "3"]


@pytest.mark.django_db
def test_job_page__every_time_is_written_one_way(admin_client: Client) -> None:
    job = failed_three_times()
    job.heartbeat_at, job.deadline_at = job.attempted_at, job.finalized_at
    job.save()
    text = visible_text(page_of(admin_client, job))

    # Each time the row holds, and each the error history holds, is on the page in the one format ...
    times = [job.created_at, job.run_at, job.attempted_at, job.heartbeat_at, job.deadline_at, job.finalized_at]
    times += [datetime.fromisoformat(e[key]) for e in job.errors for key in ("at", "started_at")]
    for value in times:
        assert value is not None
        assert value.astimezone(TOKYO).strftime("%Y-%m-%d %H:%M:%S JST") in text
    # ... and every date or clock time on the page is part of a time written that way.
    outside = SHOWN.sub(" ", text)
    assert re.findall(r"\d{1,2}:\d{2}|\d{4}-\d{2}-\d{2}|\b[ap]\.m\.", outside) == []


@pytest.mark.django_db
def test_job_page__an_attempt_under_a_second_shows_its_milliseconds(admin_client: Client) -> None:
    cells = attempt_cells(page_of(admin_client, failed_three_times()))

    assert [row[3] for row in cells.values()] == ["4 ms", "4 ms", "4 ms"]


@pytest.mark.parametrize(
    ("duration", "shown"),
    [
        (timedelta(milliseconds=4), "4 ms"),
        (timedelta(microseconds=4999), "4 ms"),
        (timedelta(milliseconds=999, microseconds=999), "999 ms"),
        (timedelta(microseconds=999), "<1 ms"),
        (timedelta(0), "<1 ms"),
        (timedelta(seconds=1), "1s"),
        (timedelta(seconds=61), "1m 01s"),
        (None, "—"),
    ],
)
def test_shown_duration__cases(duration: timedelta | None, shown: str) -> None:
    assert shown_duration(duration) == shown


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=9)))
def test_shown_duration__milliseconds_below_a_second_format_age_from_one(duration: timedelta) -> None:
    shown = shown_duration(duration)
    if duration < timedelta(seconds=1):
        assert shown.endswith(" ms") and (shown == "<1 ms" or int(shown[:-3]) == duration // timedelta(milliseconds=1))
    else:
        assert shown == format_age(duration)


def test_shown_time__an_error_entry_s_iso_text_is_written_as_the_row_s_times() -> None:
    when = datetime(2026, 12, 4, 20, 10, 17, 345_000, tzinfo=ZoneInfo("UTC"))
    with override_settings(TIME_ZONE="Asia/Tokyo"), timezone.override(TOKYO):
        assert shown_time(when) == shown_time(when.isoformat()) == "2026-12-05 05:10:17 JST"
    assert shown_time(None) == shown_time("") == "—"
    assert shown_time("not a time") == "not a time"


@pytest.mark.django_db(transaction=True)
def test_job_page__cancelled_while_running_keeps_the_attempt_s_start_worker_and_duration(
    admin_client: Client,
) -> None:
    started = threading.Event()
    stopped = threading.Event()

    def hold(context: JobContext) -> None:
        started.set()
        while not context.cancelled:
            time.sleep(0.01)
        stopped.set()

    registry = Registry()
    registry.register(JobHandler("hold", hold, queue=QUEUE, takes_context=True))
    with running_worker(make_config([QUEUE]), registry=registry):
        job = Job.objects.enqueue("hold", queue=QUEUE)
        assert started.wait(30), "the worker did not start the job"
        running = Job.objects.get(pk=job.pk)
        assert running.state == "running"
        worker = str(wait_until(WorkerInstance.objects.first, what="the worker's row"))

        response = admin_client.post(reverse("admin:awa_job_act", args=[job.pk, "cancel"]), {"reason": "customer left"})
        assert response.status_code == 302
        assert stopped.wait(30), "the handler never saw the cancel"

    cancelled = Job.objects.get(pk=job.pk)
    assert cancelled.state == "cancelled"
    entry = cancelled.errors[-1]
    assert (entry["error"], entry["worker"]) == ("cancelled: by admin: customer left", running.attempted_by)
    assert datetime.fromisoformat(entry["started_at"]) == running.attempted_at
    [cells] = attempt_cells(page_of(admin_client, cancelled)).values()
    started_shown = running.attempted_at.astimezone(TOKYO).strftime("%Y-%m-%d %H:%M:%S JST")
    assert cells[1] == started_shown
    assert SHOWN.fullmatch(cells[2])
    assert re.fullmatch(r"\d+ ms|<1 ms|\d+s", cells[3]), cells[3]
    assert cells[4:6] == [worker, "cancelled"]
    assert "customer left" in cells[6]


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [900, 2000])
def test_job_page__args_nested_deeper_than_python_recurses_is_a_page_not_a_500(
    admin_client: Client, depth: int
) -> None:
    """Enqueue refuses args nested past MAX_JSON_DEPTH, but jsonb holds any depth and another
    producer (SQL, another language) may write it. At 900 levels pretty_json's json.dumps(indent=2)
    raises RecursionError; at 2000 loading the row does (json.loads in JSONField.from_db_value):
    the job's page answers 500, and the operator cannot see or act on the job from it."""
    job = JobFactory(kind="deep", queue=QUEUE)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job SET args = jsonb_build_object('a', (repeat('[', %s) || repeat(']', %s))::jsonb) "
            "WHERE id = %s",
            [depth, depth, job.pk],
        )

    response = admin_client.get(reverse("admin:awa_job_change", args=[job.pk]))

    assert response.status_code == 200
    assert "JSON nested too deeply to show here" in response.content.decode()
