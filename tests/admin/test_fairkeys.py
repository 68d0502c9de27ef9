"""Fair keys in the admin: the Queue form's key defaults, the FairKey admin's form errors naming
the value, the hard-reserved cap warning (form message and system check awa.W007), a row for a queue
nothing uses (awa.W008), and the Job admin's fair_key column, filter and search."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.checks import Warning as CheckWarning
from django.core.checks import run_checks
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.checks import check_fair_keys
from awa_django.defaults import FAIR_KEY_MAX_LENGTH
from awa_django.forms import FairKeyForm, QueueForm
from awa_django.models import FairKey, Job, Queue
from tests.admin.conftest import client_for, messages_of
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db

QUEUE_VALID = {
    "name": "exports",
    "paused": False,
    "max_workers": 10,
    "min_workers": 0,
    "weight": 1,
    "rate_limit": "",
    "rate_burst": 0,
    "deadline": "",
    "priority_aging": "",
}


def errors_of(form: Any, field: str) -> str:
    assert not form.is_valid()
    return " ".join(form.errors[field])


@pytest.fixture
def admin_client(db: None) -> Client:
    return client_for(User.objects.create_superuser("root", password=None))


# --- the Queue form --------------------------------------------------------------------------


def test_queue_form__key_defaults_save_and_empty_means_weight_1_unlimited() -> None:
    form = QueueForm(data={**QUEUE_VALID, "key_weight": "3", "key_max_running": "2"})
    assert form.is_valid(), form.errors
    queue = form.save()
    assert (queue.key_weight, queue.key_max_running) == (3, 2)

    form = QueueForm(data={**QUEUE_VALID, "key_weight": "", "key_max_running": ""}, instance=queue)
    assert form.is_valid(), form.errors
    assert (form.save().key_weight, queue.key_max_running) == (1, None)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("key_weight", "0", "key_weight 0 is invalid; each key's weight must be an integer of at least 1"),
        ("key_weight", "-2", "key_weight -2 is invalid"),
        ("key_max_running", "0", "key_max_running 0 is invalid; a key's cap must be an integer of at least 1"),
        ("key_max_running", "-1", "key_max_running -1 is invalid"),
    ],
)
def test_queue_form__bad_key_defaults_refused_naming_the_value(field: str, value: str, says: str) -> None:
    assert says in errors_of(QueueForm(data={**QUEUE_VALID, field: value}), field)
    assert not Queue.objects.exists()


# --- the FairKey form and admin ----------------------------------------------------------------


def key_form(**changes: Any) -> FairKeyForm:
    return FairKeyForm(data={"queue": "exports", "key": "tenant:42", "weight": "", "max_running": "", **changes})


def test_fairkey_form__a_key_is_stored_exactly_as_typed_empty_is_the_default_key() -> None:
    for key in (" tenant:42 ", "", "ключ\tü"):
        form = key_form(key=key)
        assert form.is_valid(), form.errors
        assert form.save().key == key
    assert sorted(FairKey.objects.values_list("key", flat=True)) == sorted([" tenant:42 ", "", "ключ\tü"])


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"weight": "0"}, "weight", "weight 0 is invalid; a key's weight must be an integer of at least 1"),
        ({"max_running": "-1"}, "max_running", "max_running -1 is invalid; a key's cap must be an integer"),
        ({"max_running": "0"}, "max_running", "max_running 0 is invalid"),
        ({"key": "a\x00b"}, "key", "key 'a\\x00b': contains a NUL character"),
        (
            {"key": "k" * (FAIR_KEY_MAX_LENGTH + 1)},
            "key",
            f"is {FAIR_KEY_MAX_LENGTH + 1} characters long; the limit is {FAIR_KEY_MAX_LENGTH}",
        ),
        ({"queue": ""}, "queue", "This field is required"),
        ({"queue": "   "}, "queue", "This field is required"),
    ],
    ids=["weight-0", "cap-negative", "cap-0", "nul", "too-long", "no-queue", "blank-queue"],
)
def test_fairkey_form__bad_values_refused_naming_them(changes: dict[str, str], field: str, says: str) -> None:
    assert says in errors_of(key_form(**changes), field)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.text(max_size=FAIR_KEY_MAX_LENGTH + 4))
def test_fairkey_form__accepts_exactly_the_keys_enqueue_accepts(key: str) -> None:
    from awa_django.jobspec import fair_key_problem

    form = key_form(key=key)
    assert form.is_valid() == (fair_key_problem(key) is None), form.errors


def test_fairkey_form__one_row_per_queue_and_key() -> None:
    FairKey.objects.create(queue="exports", key="tenant:42", weight=2)
    assert "already exists" in " ".join(str(e) for e in key_form().errors.get("__all__", []))


def test_fairkey_admin__lists_what_is_in_force_and_saves_with_a_cap_warning(admin_client: Client) -> None:
    QueueFactory(name="exports", max_workers=4, key_weight=3, key_max_running=2)
    FairKey.objects.create(queue="exports", key="tenant:1", weight=5)
    FairKey.objects.create(queue="exports", key="", max_running=1)

    page = admin_client.get("/admin/awa/fairkey/").content.decode()
    assert "<code>tenant:1</code>" in page and "(default key)" in page
    assert "3 (the queue&#x27;s)" in page and "2 (the queue&#x27;s)" in page

    response = admin_client.post(
        "/admin/awa/fairkey/add/",
        {"queue": "exports", "key": "tenant:big", "weight": "", "max_running": "9"},
        follow=True,
    )
    assert FairKey.objects.get(key="tenant:big").max_running == 9
    (warning,) = [m for m in messages_of(response) if "above" in m]
    assert "the cap 9 is above the max_workers (4) of queue 'exports' in hard-reserved mode" in warning
    assert "awa.W007" in warning


def test_fairkey_admin__a_nul_search_matches_nothing(admin_client: Client) -> None:
    FairKey.objects.create(queue="exports", key="tenant:1")
    assert admin_client.get("/admin/awa/fairkey/", {"q": "a\x00"}).status_code == 200


# --- system checks --------------------------------------------------------------------------


def test_check_fair_keys__caps_above_max_workers_in_hard_reserved_mode_are_w007() -> None:
    QueueFactory(name="exports", max_workers=4, key_max_running=5)
    QueueFactory(name="emails", max_workers=4, key_max_running=4)  # equal: fine
    FairKey.objects.create(queue="emails", key="tenant:1", max_running=6)
    FairKey.objects.create(queue="emails", key="tenant:2", max_running=3)

    messages = check_fair_keys(databases=["default"])

    assert [m.id for m in messages] == ["awa.W007", "awa.W007"]
    assert all(isinstance(m, CheckWarning) for m in messages)
    assert "queue 'exports': key_max_running (5) is above its max_workers (4)" in messages[0].msg
    assert "queue 'emails': the max_running of key 'tenant:1' (6) is above its max_workers (4)" in messages[1].msg
    assert messages[0].hint is not None and "at most 4" in messages[0].hint
    assert "awa.W007" in [m.id for m in run_checks(databases=["default"])]
    assert check_fair_keys() == []  # like every check that reads rows: only with `check --database`


@override_settings(AWA={"GLOBAL_MAX_WORKERS": 3})
def test_check_fair_keys__weighted_mode_has_no_per_worker_max_workers_to_compare() -> None:
    QueueFactory(name="exports", max_workers=4, key_max_running=50)
    assert check_fair_keys(databases=["default"]) == []


def test_check_fair_keys__rows_for_a_queue_nothing_uses_are_w008() -> None:
    QueueFactory(name="exports")
    FairKey.objects.create(queue="exports", key="tenant:1", weight=2)
    FairKey.objects.create(queue="exprots", key="tenant:1", weight=2)

    (message,) = check_fair_keys(databases=["default"])

    assert message.id == "awa.W008"
    assert "queue 'exprots' (1 key(s), e.g. 'tenant:1')" in message.msg
    assert "the Fair key overrides admin" in str(message.hint)  # the admin's name as its sidebar shows it


# --- the Job admin ------------------------------------------------------------------------------


def test_job_admin__fair_key_column_filter_and_search(admin_client: Client) -> None:
    mine = Job.objects.enqueue("export", queue="exports", fair_key="tenant:42")
    plain = Job.objects.enqueue("export", queue="exports")
    other = Job.objects.enqueue("export", queue="exports", fair_key="tenant:7")

    def listed(**params: str) -> set[int]:
        response = admin_client.get("/admin/awa/job/", params)
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    page = admin_client.get("/admin/awa/job/").content.decode()
    assert "<code>tenant:42</code>" in page and "fair key" in page and "fairness" not in page
    assert listed(fair_key="tenant:42") == {mine.pk}
    assert listed(fair_key="") == {plain.pk}  # the default key
    assert listed() == {mine.pk, plain.pk, other.pk}
    assert listed(fair_key="a\x00") == set()
    assert listed(q="tenant:7") == {other.pk}
    assert listed(q="export") == {mine.pk, plain.pk, other.pk}  # a kind still matches
    detail = admin_client.get(f"/admin/awa/job/{mine.pk}/change/").content.decode()
    assert "tenant:42" in detail
