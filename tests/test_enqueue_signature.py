"""Every enqueue door checks the args against the registered handler before writing anything;
the handler's ``.enqueue(**args)`` / ``.using(...)`` convention; the deprecated dict form."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.exceptions import InvalidJobError, InvalidScheduleError
from awa_django.models import Job
from awa_django.registry import JobHandler, RegistryError, job, registry, schedule
from awa_django.schedules import schedules

KIND = "test_sig_welcome"
SIGNATURE = "send_welcome(user_id: int, note: str = '') -> None"


@pytest.fixture
def handler() -> Iterator[JobHandler]:
    @job(KIND, queue="emails", priority=3, timeout=30)
    def send_welcome(user_id: int, note: str = "") -> None:
        return None

    try:
        yield send_welcome
    finally:
        registry.unregister(KIND)
        schedules.remove("test_sig_schedule")


def refused(raised: pytest.ExceptionInfo[InvalidJobError], *names: str) -> None:
    message = str(raised.value)
    assert repr(KIND) in message and SIGNATURE in message, message
    for name in names:
        assert name in message, message


@pytest.mark.django_db
def test_enqueue__unknown_name__refused_naming_kind_name_and_signature_nothing_written(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError) as raised:
        Job.objects.enqueue(KIND, {"uid": 1})

    refused(raised, "unknown argument(s) ['uid']")
    assert not Job.objects.filter(kind=KIND).exists()


@pytest.mark.django_db
def test_enqueue__missing_required__refused(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError) as raised:
        Job.objects.enqueue(KIND, {"note": "hi"})

    refused(raised, "missing required argument(s) ['user_id']")


@pytest.mark.django_db
def test_enqueue__bool_for_int__refused_as_a_type_mismatch(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError) as raised:
        Job.objects.enqueue(KIND, {"user_id": True})

    refused(raised, "argument 'user_id' is bool True, not int")


@pytest.mark.django_db(transaction=True)
def test_aenqueue__mismatch__refused(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError) as raised:
        async_to_sync(Job.objects.aenqueue)(KIND, {"user_id": 1, "extra": 2})

    refused(raised, "['extra']")
    assert not Job.objects.filter(kind=KIND).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad",
    [
        {"kind": KIND, "args": {"uid": 1}},  # the plain-spec path
        {"kind": KIND, "args": {"uid": 1}, "tags": ["t"]},  # the full-spec path
        {"kind": KIND},
    ],
)
def test_enqueue_many__mismatch__refused_naming_the_spec_index_nothing_written(
    handler: JobHandler, bad: dict[str, Any]
) -> None:
    specs: list[Any] = [{"kind": KIND, "args": {"user_id": 1}}, {"kind": "noop"}, bad]

    with pytest.raises(InvalidJobError) as raised:
        Job.objects.enqueue_many(specs)

    refused(raised, "job spec #2: ")
    assert raised.value.index == 2
    assert not Job.objects.filter(kind__in=[KIND, "noop"]).exists()


@pytest.mark.django_db
def test_enqueue__handlerless_kind__accepted_with_any_args() -> None:
    Job.objects.enqueue("test_sig_nobody_handles_this", {"anything": [1, 2]})
    assert Job.objects.enqueue_many([{"kind": "test_sig_nobody_handles_this", "args": {"x": 1}}]) == 1

    assert Job.objects.filter(kind="test_sig_nobody_handles_this").count() == 2


@pytest.mark.django_db
def test_enqueue__kinds_timeout__stored_on_the_row_by_every_path(handler: JobHandler) -> None:
    one = Job.objects.enqueue(KIND, {"user_id": 1})
    Job.objects.enqueue_many(
        [{"kind": KIND, "args": {"user_id": 2}}, {"kind": KIND, "args": {"user_id": 3}, "tags": ["x"]}]
    )

    assert one.timeout == timedelta(seconds=30)
    assert set(Job.objects.filter(kind=KIND).values_list("timeout", flat=True)) == {timedelta(seconds=30)}
    assert Job.objects.enqueue("noop").timeout is None


SPEC_VALUES = st.fixed_dictionaries(
    {"user_id": st.integers(1, 10**6)},
    optional={"note": st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5)},
)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    args=SPEC_VALUES,
    tags=st.lists(st.sampled_from(["a", "b"]), max_size=2),
    delay=st.sampled_from([None, 60]),
    unique=st.booleans(),
)
@pytest.mark.django_db
def test_enqueue__returned_instance_equals_the_row_read_back(
    handler: JobHandler, args: dict[str, Any], tags: list[str], delay: int | None, unique: bool
) -> None:
    run_at = None if delay is None else timezone.now() + timedelta(seconds=delay)
    enqueued = Job.objects.enqueue(KIND, args, tags=tags, run_at=run_at, unique=unique)

    stored = Job.objects.get(pk=enqueued.pk)
    for field in Job._meta.concrete_fields:
        assert getattr(enqueued, field.attname) == getattr(stored, field.attname), field.attname
    assert not enqueued._state.adding
    Job.objects.filter(pk=enqueued.pk).delete()


# --- the handler's own convention --------------------------------------------------------------


@pytest.mark.django_db
def test_handler_enqueue__takes_the_calls_own_arguments_with_the_handlers_options(handler: JobHandler) -> None:
    enqueued = handler.enqueue(user_id=7, note="hi")

    stored = Job.objects.get(pk=enqueued.pk)
    assert (stored.kind, stored.args, stored.queue, stored.priority) == (
        KIND,
        {"user_id": 7, "note": "hi"},
        "emails",
        3,
    )


@pytest.mark.django_db(transaction=True)
def test_handler_aenqueue__takes_the_calls_own_arguments(handler: JobHandler) -> None:
    enqueued = async_to_sync(handler.aenqueue)(user_id=8)

    assert Job.objects.get(pk=enqueued.pk).args == {"user_id": 8}


@pytest.mark.django_db(transaction=True)
def test_handler_using__options_then_arguments_sync_and_async(handler: JobHandler) -> None:
    later = timezone.now() + timedelta(minutes=5)
    call = handler.using(queue="reports", priority=1).using(run_at=later, tags=["vip"])

    first = call.enqueue(user_id=1)
    second = async_to_sync(call.aenqueue)(user_id=2)

    for enqueued in (first, second):
        stored = Job.objects.get(pk=enqueued.pk)
        assert (stored.queue, stored.priority, stored.tags, stored.state) == ("reports", 1, ["vip"], "scheduled")


def test_handler_using__unknown_option__refused_naming_it_and_the_allowed_ones(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError, match=r"'qeue'.*unknown enqueue option.*max_attempts, metadata, priority"):
        handler.using(qeue="emails")


@pytest.mark.django_db
def test_handler_using__none_is_the_kinds_default_as_at_every_other_door(handler: JobHandler) -> None:
    # Job.objects.enqueue(queue=None, ...) and an enqueue_many spec's None mean the @job's options;
    # handler.using(queue=None) raised "must be a non-empty string", and None could not undo a value.
    enqueued = handler.using(queue=None, priority=None, max_attempts=None).enqueue(user_id=1)
    reset = handler.using(queue="reports", priority=1).using(queue=None, priority=None).enqueue(user_id=2)

    for one in (enqueued, reset):
        stored = Job.objects.get(pk=one.pk)
        assert (stored.queue, stored.priority, stored.max_attempts) == ("emails", 3, handler.max_attempts)


def test_handler_using__bad_option_value__refused_where_it_is_written(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError, match="priority=9: must be an integer from 1 to 4"):
        handler.using(priority=9)


@pytest.mark.django_db
def test_handler_enqueue__an_option_passed_as_an_argument__says_where_options_go(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError, match=r"unknown argument\(s\) \['queue'\].*using\(queue=\.\.\.\)"):
        handler.enqueue(user_id=1, queue="emails")

    assert not Job.objects.filter(kind=KIND).exists()


@pytest.mark.django_db
def test_handler_enqueue__bad_arguments__refused_before_writing(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError) as raised:
        handler.enqueue(uid=1)

    refused(raised, "['uid']")
    assert not Job.objects.filter(kind=KIND).exists()


@pytest.mark.django_db
def test_handler_enqueue__dict_form__still_works_with_a_deprecation_warning(handler: JobHandler) -> None:
    with pytest.warns(DeprecationWarning, match=r"enqueue\(dict, \*\*options\) is deprecated.*using\(queue="):
        enqueued = handler.enqueue({"user_id": 5}, queue="reports")

    stored = Job.objects.get(pk=enqueued.pk)
    assert (stored.args, stored.queue) == ({"user_id": 5}, "reports")


@pytest.mark.django_db
def test_handler_enqueue__dict_form__checked_against_the_signature_too(handler: JobHandler) -> None:
    with pytest.warns(DeprecationWarning, match=r"enqueue\(dict, \*\*options\) is deprecated"):
        with pytest.raises(InvalidJobError) as raised:
            handler.enqueue({"uid": 5})

    refused(raised, "['uid']")


def test_handler_enqueue__two_positionals__refused_saying_how_to_pass_arguments(handler: JobHandler) -> None:
    with pytest.raises(InvalidJobError, match=r"pass the job's arguments by name"):
        handler.enqueue({"user_id": 1}, {"note": ""})


# --- cron declarations -----------------------------------------------------------------------


def test_job_with_cron__args_not_fitting__refused_at_declaration() -> None:
    with pytest.raises(InvalidScheduleError, match=r"args \{'uid': 1\} do not match the handler.*unknown argument"):

        @job("test_sig_cron", cron="*/5 * * * *", args={"uid": 1})
        def tick(user_id: int) -> None:
            return None

    assert "test_sig_cron" not in registry


def test_schedule__args_not_fitting_the_registered_handler__refused(handler: JobHandler) -> None:
    with pytest.raises(InvalidScheduleError, match=r"schedule 'test_sig_schedule'.*missing required.*user_id"):
        schedule("test_sig_schedule", KIND, "0 * * * *", args={"note": "x"})


def test_schedule__declared_before_its_handler__checked_when_the_handler_registers() -> None:
    schedule("test_sig_schedule", "test_sig_late", "0 * * * *", args={"uid": 1})
    try:
        with pytest.raises(InvalidScheduleError, match="unknown argument"):

            @job("test_sig_late")
            def late(user_id: int) -> None:
                return None
    finally:
        schedules.remove("test_sig_schedule")
        registry.unregister("test_sig_late")


def test_job__takes_context_without_a_positional_parameter__refused_at_declaration() -> None:
    with pytest.raises(RegistryError, match="no positional parameter for the JobContext"):

        @job("test_sig_ctx", takes_context=True)
        def broken(*, user_id: int) -> None:
            return None
