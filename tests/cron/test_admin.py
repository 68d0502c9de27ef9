"""The Schedule admin: a bad cron expression or zone is refused with a message naming it;
create, pause, resume and run now go through the services; code-owned fields are read-only."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.core.checks import Error, Warning
from django.test import Client
from django.urls import reverse

from awa_django.checks import check_schedules
from awa_django.models import Job, Schedule, ScheduleSource
from awa_django.services.schedules import next_fire_after, save_schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


def form_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "nightly",
        "kind": "noop",
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "args": "{}",
        "queue": "default",
        "priority": 2,
        "max_attempts": 25,
        "missed": "coalesce",
        "catch_up_limit": 100,
    }
    data.update(overrides)
    return data


def errors_of(response: Any) -> dict[str, list[str]]:
    return {k: [str(e) for e in v] for k, v in response.context["adminform"].form.errors.items()}


def test_add__creates_the_schedule_with_its_next_fire(client: Client) -> None:
    response = client.post(reverse("admin:awa_schedule_add"), form_data())
    assert response.status_code == 302, errors_of(response)
    row = Schedule.objects.get(name="nightly")
    assert row.source == ScheduleSource.ADMIN
    assert row.next_fire_at is not None and row.next_fire_at > datetime.now(timezone.utc)
    assert row.next_fire_at.astimezone(row.next_fire_at.tzinfo).minute == 0


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("cron", "0 3 * *", "schedule 'nightly': cron '0 3 * *' (Europe/Paris): has 4 fields"),
        ("cron", "0 24 * * *", "cron '0 24 * * *' (Europe/Paris): is not a valid cron expression"),
        ("timezone", "Paris", "'Paris' is not a known IANA time zone"),
        ("kind", "no_such_kind", "no @job handler registers kind 'no_such_kind'"),
        ("args", "[1, 2]", "args must be a JSON object"),
        # Postgres' jsonb refuses \u0000 and a lone surrogate: a form error, not a 500 at the INSERT.
        ("args", '{"note": "a\\u0000b"}', "args['note'] contains a NUL character"),
        ("args", '{"note": "\\udcff"}', "args['note'] contains a lone surrogate"),
        ("args", '{"\\u0000": 1}', "a key of args"),
        # The rules a schedule declared in code is held to (schedule_spec), each on its field,
        # naming the value and the range, not "Constraint … is violated" for the whole form.
        ("name", "night\tly", "holds a control character"),
        ("queue", "de\tfault", "holds a control character"),
        ("priority", "9", "priority=9: must be an integer from 1 to 4"),
        ("priority", "0", "priority=0: must be an integer from 1 to 4"),
        ("max_attempts", "0", "max_attempts=0: must be an integer from 1 to 1000"),
        ("catch_up_limit", "0", "catch_up_limit=0 must be an integer from 1 to"),
    ],
)
def test_add__bad_values_are_refused_naming_them(client: Client, field: str, value: str, words: str) -> None:
    response = client.post(reverse("admin:awa_schedule_add"), form_data(**{field: value}))
    assert response.status_code == 200
    assert any(words in message for message in errors_of(response).get(field, [])), errors_of(response)
    assert not Schedule.objects.exists()


def test_change_list_and_detail__show_next_fires_and_links(client: Client) -> None:
    row = save_schedule(Schedule(name="nightly", kind="noop", cron="0 3 * * *", timezone="Europe/Paris"))
    job = Job.objects.enqueue("noop", metadata={"schedule": "nightly"})
    Schedule.objects.filter(pk=row.pk).update(last_job_id=job.pk)
    listing = client.get(reverse("admin:awa_schedule_changelist"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "03:00:00 CE" in page  # next fire shown in the schedule's zone
    detail = client.get(reverse("admin:awa_schedule_change", args=[row.pk])).content.decode()
    assert "Next fire times" in detail
    for moment in next_fire_after(row, count=5):
        assert moment.astimezone(ZoneInfo("Europe/Paris")).strftime("%Y-%m-%d %H:%M:%S %Z") in detail
    assert reverse("admin:awa_job_change", args=[job.pk]) in detail
    jobs_link = reverse("admin:awa_job_changelist") + "?kind=noop&amp;metadata__schedule=nightly"
    assert jobs_link in detail
    jobs_page = client.get(reverse("admin:awa_job_changelist") + "?kind=noop&metadata__schedule=nightly")
    assert jobs_page.status_code == 200
    assert list(jobs_page.context["cl"].result_list) == [job]


def test_change__retiming_moves_next_fire_but_never_rewinds_the_leaders_fire(client: Client) -> None:
    row = save_schedule(Schedule(name="nightly", kind="noop", cron="0 3 * * *"))
    form = client.get(reverse("admin:awa_schedule_change", args=[row.pk]))
    assert form.status_code == 200
    fired_at = datetime.now(timezone.utc) - timedelta(hours=1)
    Schedule.objects.filter(pk=row.pk).update(last_fire_at=fired_at, last_job_id=42)  # the leader, meanwhile
    response = client.post(
        reverse("admin:awa_schedule_change", args=[row.pk]), form_data(cron="0 5 * * *", timezone="UTC")
    )
    assert response.status_code == 302, errors_of(response)
    row.refresh_from_db()
    assert (row.cron, row.last_fire_at, row.last_job_id) == ("0 5 * * *", fired_at, 42)
    assert row.next_fire_at is not None and row.next_fire_at.hour == 5


def test_change__a_code_schedule_shows_code_owned_fields_read_only(client: Client) -> None:
    row = save_schedule(Schedule(name="from_code", kind="noop", cron="0 3 * * *", source=ScheduleSource.CODE))
    response = client.get(reverse("admin:awa_schedule_change", args=[row.pk]))
    fields = response.context["adminform"].form.fields
    assert "cron" not in fields and "args" not in fields and "paused" in fields


def test_actions__pause_resume_run_now(client: Client) -> None:
    row = save_schedule(Schedule(name="nightly", kind="noop", cron="0 3 * * *"))
    url = reverse("admin:awa_schedule_changelist")
    client.post(url, {"action": "pause_selected", "_selected_action": [row.pk]})
    assert Schedule.objects.get(pk=row.pk).paused
    client.post(url, {"action": "run_selected_now", "_selected_action": [row.pk]})
    (job,) = Job.objects.all()
    assert job.metadata["schedule"] == "nightly" and job.metadata["run_now"] is True
    assert Schedule.objects.get(pk=row.pk).next_fire_at == row.next_fire_at  # did not move
    client.post(url, {"action": "resume_selected", "_selected_action": [row.pk]})
    assert not Schedule.objects.get(pk=row.pk).paused


def test_check_schedules__bad_rows_are_e008_unknown_kinds_w002() -> None:
    Schedule.objects.create(name="broken", kind="noop", cron="0 25 * * *")
    Schedule.objects.create(name="orphan", kind="gone_kind", cron="0 3 * * *")
    Schedule.objects.create(name="orphan_paused", kind="gone_kind", cron="0 3 * * *", paused=True)
    messages = check_schedules(databases=["default"])
    assert check_schedules() == []  # run only when asked to read the database (check --database)
    assert [(type(m), m.id, m.obj) for m in messages] == [
        (Error, "awa.E009", "broken"),
        (Warning, "awa.W002", "orphan"),
    ]
    assert "cron '0 25 * * *'" in messages[0].msg and "Schedule admin" in (messages[0].hint or "")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ('{"user": 1}', "unknown argument(s) ['user']"),
        ("{}", "missing required argument(s) ['user_id']"),
        ('{"user_id": "7"}', "argument 'user_id' is str '7', not int"),
    ],
)
def test_add__args_that_do_not_fit_the_handler_are_a_form_error_naming_argument_and_handler(
    client: Client, args: str, words: str
) -> None:
    response = client.post(reverse("admin:awa_schedule_add"), form_data(kind="send_welcome", args=args))

    assert response.status_code == 200
    (error,) = errors_of(response)["args"]
    assert words in error
    assert "do not match the handler of 'send_welcome'" in error and "send_welcome(user_id: int)" in error
    assert not Schedule.objects.exists()


def test_add__args_that_fit_the_handler_are_saved(client: Client) -> None:
    response = client.post(reverse("admin:awa_schedule_add"), form_data(kind="send_welcome", args='{"user_id": 7}'))

    assert response.status_code == 302, errors_of(response)
    assert Schedule.objects.get(name="nightly").args == {"user_id": 7}


def test_change__a_paused_row_left_as_it_is_may_keep_bad_args_until_resumed(client: Client) -> None:
    row = save_schedule(Schedule(name="nightly", kind="send_welcome", cron="0 3 * * *", args={"user": 1}, paused=True))
    url = reverse("admin:awa_schedule_change", args=[row.pk])
    data = form_data(kind="send_welcome", args='{"user": 1}', paused="on")
    del data["name"]  # read-only once saved

    first = client.post(url, data)  # e.g. its priority edited, still paused
    assert first.status_code == 302, errors_of(first)
    del data["paused"]
    response = client.post(url, data)  # resumed through the form: now its args must fit
    assert response.status_code == 200
    assert "unknown argument(s) ['user']" in errors_of(response)["args"][0]
    assert Schedule.objects.get(pk=row.pk).paused


def test_actions__run_now_of_a_row_with_bad_args_is_a_message_not_a_500(client: Client) -> None:
    """Rows written around the form (a migration, the shell) are run one by one: the good one runs."""
    bad = Schedule.objects.create(name="bad", kind="send_welcome", cron="0 3 * * *", args={"user": 1})
    good = Schedule.objects.create(name="good", kind="send_welcome", cron="0 3 * * *", args={"user_id": 7})
    url = reverse("admin:awa_schedule_changelist")

    response = client.post(url, {"action": "run_selected_now", "_selected_action": [bad.pk, good.pk]}, follow=True)

    assert response.status_code == 200
    texts = [(m.level_tag, str(m)) for m in response.context["messages"]]
    (job,) = Job.objects.all()
    assert job.metadata["schedule"] == "good"
    assert ("success", f"Enqueued 1 job(s) now: #{job.pk}.") in texts
    (error,) = [text for level, text in texts if level == "error"]
    assert error.startswith("Schedule 'bad' was not run: ")
    assert "unknown argument(s) ['user']" in error and "send_welcome(user_id: int)" in error
    assert "Correct its kind or args" in error


def test_check_schedules__active_row_whose_args_do_not_fit_its_handler_is_w009() -> None:
    Schedule.objects.create(name="bad_args", kind="send_welcome", cron="0 3 * * *", args={"user": 1})
    Schedule.objects.create(name="not_an_object", kind="send_welcome", cron="0 3 * * *", args=[7])
    Schedule.objects.create(name="bad_but_paused", kind="send_welcome", cron="0 3 * * *", args={}, paused=True)
    Schedule.objects.create(name="fits", kind="send_welcome", cron="0 3 * * *", args={"user_id": 7})

    messages = check_schedules(databases=["default"])

    assert [(type(m), m.id, m.obj) for m in messages] == [
        (Warning, "awa.W009", "bad_args"),
        (Warning, "awa.W009", "not_an_object"),
    ]
    assert "unknown argument(s) ['user']" in messages[0].msg and "send_welcome(user_id: int)" in messages[0].msg
    assert "[7] are not a JSON object" in messages[1].msg
    assert "Schedule admin" in (messages[0].hint or "") and "pause it" in (messages[0].hint or "")
