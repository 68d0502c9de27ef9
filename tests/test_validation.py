"""Every bad input is refused with InvalidJobError before anything is written.

Each case names the field, the value's repr that must appear in the message, and the part of the
message that states the rule (the allowed range or type). Every case runs through ``enqueue`` and
through ``enqueue_many`` (behind a valid spec, so the error must name index 1).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.exceptions import InvalidJobError
from awa_django.managers import UniqueOptions
from awa_django.models import Job
from awa_django.validation import BRIEF_LENGTH, MAX_JSON_BYTES, MAX_JSON_DEPTH, brief

NAIVE = datetime(2030, 1, 1, 12, 0)  # naive on purpose
LONG = "x" * 256


class StrSub(str):
    pass


class ListSub(list):  # type: ignore[type-arg]
    pass


class DictSub(dict):  # type: ignore[type-arg]
    pass


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


DEEP = _nested(10_000)
LOOP: list[Any] = []
LOOP.append(LOOP)
HUGE = "x" * (MAX_JSON_BYTES + 1)
BIG_INT = 10**5000

# (id, enqueue kwargs, field named in the error, rule fragment of the message)
BAD_INPUTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("args-object", {"args": object()}, "args", "must be a dict"),
    ("args-list", {"args": [1, 2]}, "args", "must be a dict (JSON object), not list"),
    ("args-str", {"args": "user_id=1"}, "args", "not str"),
    ("args-value-object", {"args": {"user": object()}}, "args", "not JSON-serialisable"),
    ("args-set", {"args": {"ids": {1, 2}}}, "args", "not JSON-serialisable"),
    ("args-nan", {"args": {"x": float("nan")}}, "args", "not JSON-serialisable"),
    ("args-inf", {"args": {"x": float("inf")}}, "args", "not JSON-serialisable"),
    ("args-int-key", {"args": {1: "a"}}, "args", "keys must be strings; 1 is not"),
    ("args-nested-int-key", {"args": {"a": [{2: "b"}]}}, "args", "keys must be strings; 2 is not"),
    ("args-tuple-key", {"args": {"a": {(1, 2): "b"}}}, "args", "keys must be strings; (1, 2) is not"),
    ("args-nul", {"args": {"s": "a\x00b"}}, "args", "NUL"),
    ("args-nul-key", {"args": {"a": {"k\x00": 1}}}, "args", "NUL"),
    ("kind-empty", {"kind": ""}, "kind", "must be a non-empty string"),
    ("kind-whitespace", {"kind": " \t "}, "kind", "must be a non-empty string"),
    ("kind-none", {"kind": None}, "kind", "must be a non-empty string"),
    ("kind-int", {"kind": 5}, "kind", "must be a non-empty string"),
    ("kind-too-long", {"kind": LONG}, "kind", "is 256 characters long; the limit is 255"),
    ("kind-nul", {"kind": "no\x00op"}, "kind", "NUL"),
    ("queue-empty", {"queue": ""}, "queue", "must be a non-empty string"),
    ("queue-whitespace", {"queue": "  "}, "queue", "must be a non-empty string"),
    ("queue-too-long", {"queue": LONG}, "queue", "is 256 characters long; the limit is 255"),
    ("queue-nul", {"queue": "q\x00"}, "queue", "NUL"),
    ("queue-padded", {"queue": " reports "}, "queue", "starts or ends with whitespace"),
    ("queue-tab", {"queue": "a\tb"}, "queue", "control character"),
    ("queue-newline", {"queue": "a\nb"}, "queue", "control character"),
    ("kind-trailing-newline", {"kind": "noop\n"}, "kind", "starts or ends with whitespace"),
    ("kind-escape", {"kind": "no\x1bop"}, "kind", "control character"),
    ("priority-0", {"priority": 0}, "priority", "must be an integer from 1 to 4"),
    ("priority-5", {"priority": 5}, "priority", "must be an integer from 1 to 4"),
    ("priority-true", {"priority": True}, "priority", "must be an integer from 1 to 4"),
    ("priority-str", {"priority": "2"}, "priority", "must be an integer from 1 to 4"),
    ("priority-float", {"priority": 2.0}, "priority", "must be an integer from 1 to 4"),
    ("max-attempts-0", {"max_attempts": 0}, "max_attempts", "must be an integer from 1 to 1000"),
    ("max-attempts-1001", {"max_attempts": 1001}, "max_attempts", "must be an integer from 1 to 1000"),
    ("max-attempts-false", {"max_attempts": False}, "max_attempts", "must be an integer from 1 to 1000"),
    ("run-at-naive", {"run_at": NAIVE}, "run_at", "is naive but USE_TZ is on"),
    ("run-at-str", {"run_at": "2030-01-01T00:00:00Z"}, "run_at", "must be a datetime or None"),
    ("run-at-date-number", {"run_at": 1_900_000_000}, "run_at", "must be a datetime or None"),
    # Stored by Postgres, but unreadable by psycopg: the worker's claim of the row would fail.
    (
        "run-at-before-year-1-utc",
        {"run_at": datetime(1, 1, 1, tzinfo=dt_timezone(timedelta(hours=5)))},
        "run_at",
        "outside the times",
    ),
    (
        "run-at-after-9999-utc",
        {"run_at": datetime(9999, 12, 31, 23, tzinfo=dt_timezone(timedelta(hours=-5)))},
        "run_at",
        "outside the times",
    ),
    ("run-at-max", {"run_at": datetime.max.replace(tzinfo=dt_timezone.utc)}, "run_at", "outside the times"),
    ("tags-33", {"tags": [f"t{i}" for i in range(33)]}, "tags", "has 33 tags; the limit is 32"),
    ("tags-str", {"tags": "urgent"}, "tags", "must be a list of strings"),
    ("tags-int", {"tags": 3}, "tags", "must be a list of strings"),
    ("tags-int-item", {"tags": ["ok", 3]}, "tags", "tag 3 must be a non-empty string"),
    ("tags-none-item", {"tags": [None]}, "tags", "tag None must be a non-empty string"),
    ("tags-empty-item", {"tags": [""]}, "tags", "tag '' must be a non-empty string"),
    ("tags-blank-item", {"tags": ["  "]}, "tags", "tag '  ' must be a non-empty string"),
    ("tags-too-long-item", {"tags": [LONG]}, "tags", "at most 255 characters"),
    ("tags-nul-item", {"tags": ["a\x00"]}, "tags", "without NUL"),
    ("metadata-list", {"metadata": ["x"]}, "metadata", "must be a dict (JSON object), not list"),
    ("metadata-object", {"metadata": {"x": object()}}, "metadata", "not JSON-serialisable"),
    ("unique-str", {"unique": "yes"}, "unique", "must be True, a dict of options or UniqueOptions"),
    ("unique-int", {"unique": 1}, "unique", "must be True, a dict of options or UniqueOptions"),
    ("unique-unknown-option", {"unique": {"by_arg": True}}, "unique", "unknown option(s) ['by_arg']"),
    ("unique-by-args-str", {"unique": {"by_args": "no"}}, "unique.by_args", "must be True or False"),
    ("unique-by-queue-int", {"unique": {"by_queue": 1}}, "unique.by_queue", "must be True or False"),
    ("unique-period-0", {"unique": {"by_period": 0}}, "unique.by_period", "must be a positive number of seconds"),
    ("unique-period-negative", {"unique": {"by_period": -60}}, "unique.by_period", "positive number"),
    ("unique-period-str", {"unique": {"by_period": "1h"}}, "unique.by_period", "positive number"),
    ("unique-period-nan", {"unique": {"by_period": float("nan")}}, "unique.by_period", "positive number"),
    (
        "unique-period-negative-timedelta",
        {"unique": UniqueOptions(by_period=timedelta(seconds=-1))},
        "unique.by_period",
        "positive number",
    ),
    ("unique-states-unknown", {"unique": {"states": ["available", "done"]}}, "unique.states", "subset of"),
    ("unique-states-empty", {"unique": {"states": []}}, "unique.states", "must be a non-empty subset"),
    ("unique-states-str", {"unique": {"states": "available"}}, "unique.states", "subset of"),
    ("unique-states-none", {"unique": {"states": None}}, "unique.states", "subset of"),
    ("unique-options-states", {"unique": UniqueOptions(states=("finished",))}, "unique.states", "subset of"),
    # Inputs that would otherwise escape as driver errors or abort the caller's transaction
    ("args-lone-surrogate", {"args": {"s": "caf\udce9"}}, "args", "lone surrogate '\\udce9' at position 3"),
    ("args-lone-surrogate-key", {"args": {"\ud800": 1}}, "args", "lone surrogate"),
    ("metadata-lone-surrogate", {"metadata": {"a": ["\udfff"]}}, "metadata", "lone surrogate"),
    ("kind-lone-surrogate", {"kind": "send\udce9"}, "kind", "lone surrogate"),
    ("queue-lone-surrogate", {"queue": "\ud83d"}, "queue", "lone surrogate"),
    ("tags-lone-surrogate-item", {"tags": ["ok", "\udce9"]}, "tags", "lone surrogate"),
    ("args-nul-in-str-subclass", {"args": {"s": StrSub("a\x00b")}}, "args", "NUL"),
    ("args-nul-in-list-subclass", {"args": {"l": ListSub(["a\x00b"])}}, "args", "NUL"),
    ("args-nul-in-dict-subclass-key", {"args": {"d": DictSub({"k\x00": 1})}}, "args", "NUL"),
    ("args-nul-in-tuple", {"args": {"t": ("ok", "\x00")}}, "args", "NUL"),
    ("args-10000-deep", {"args": {"deep": DEEP}}, "args", f"deeper than {MAX_JSON_DEPTH} levels"),
    ("args-contains-itself", {"args": {"loop": LOOP}}, "args", f"deeper than {MAX_JSON_DEPTH} levels"),
    ("args-too-big", {"args": {"blob": HUGE}}, "args", f"the limit is {MAX_JSON_BYTES}"),
    ("args-5000-digit-int", {"args": {"n": BIG_INT}}, "args", "too many digits"),
    ("metadata-nan-in-subclass", {"metadata": DictSub(x=float("nan"))}, "metadata", "not JSON-serialisable"),
    ("tags-dict", {"tags": {"a": 1}}, "tags", "must be a list of strings, not dict"),
    ("tags-set", {"tags": {"a"}}, "tags", "must be a list of strings, not set"),
    ("tags-generator-like-range", {"tags": range(2)}, "tags", "must be a list of strings, not range"),
    ("unique-period-10e400", {"unique": {"by_period": 10**400}}, "unique.by_period", "positive number of seconds"),
    ("unique-period-tiny", {"unique": {"by_period": 1e-320}}, "unique.by_period", "from 0.001 to"),
    ("unique-period-inf", {"unique": {"by_period": float("inf")}}, "unique.by_period", "positive number"),
    ("unique-options-states-none", {"unique": UniqueOptions(states=None)}, "unique.states", "subset of"),  # type: ignore[arg-type]
    ("unique-non-str-option", {"unique": {1: True, "by_arg": 1}}, "unique", "unknown option(s) ['by_arg', 1]"),
]


def _bad_value(kwargs: dict[str, Any], field: str) -> Any:
    """The offending value, as the message must show it."""
    top, _, option = field.partition(".")
    value = kwargs[top]
    if option:
        value = getattr(value, option) if isinstance(value, UniqueOptions) else value[option]
        if option == "states" and isinstance(value, list):
            value = tuple(value)  # the options hold the states as a tuple
    return value


@pytest.mark.django_db
@pytest.mark.parametrize(("kwargs", "field", "rule"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_enqueue__bad_input_is_refused_before_writing(kwargs: dict[str, Any], field: str, rule: str) -> None:
    call = {"kind": "noop", **kwargs}
    kind = call.pop("kind")

    with pytest.raises(InvalidJobError) as caught:
        Job.objects.enqueue(kind, **call)

    error = caught.value
    assert error.field == field
    assert error.index is None
    assert f"{field}={brief(_bad_value(kwargs, field))}" in str(error)
    assert rule in str(error)
    assert len(str(error)) < 3 * BRIEF_LENGTH
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(("kwargs", "field", "rule"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_enqueue_many__bad_spec_is_refused_before_writing(kwargs: dict[str, Any], field: str, rule: str) -> None:
    specs = [{"kind": "noop"}, {"kind": "noop", **kwargs}, {"kind": "noop"}]

    with pytest.raises(InvalidJobError) as caught:
        Job.objects.enqueue_many(specs)

    error = caught.value
    assert (error.field, error.index) == (field, 1)
    assert str(error).startswith(f"job spec #1: {field}={brief(_bad_value(kwargs, field))}")
    assert rule in str(error)
    assert len(str(error)) < 3 * BRIEF_LENGTH
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        pytest.param(["noop"], "must be a dict of enqueue() arguments", id="not-a-dict"),
        pytest.param({"kind": "noop", "prio": 1}, "unknown key(s) ['prio']", id="unknown-key"),
        pytest.param({"args": {}}, "is required", id="missing-kind"),
    ],
)
def test_enqueue_many__malformed_spec_is_refused(spec: Any, rule: str) -> None:
    with pytest.raises(InvalidJobError) as caught:
        Job.objects.enqueue_many([{"kind": "noop"}, spec])

    assert caught.value.index == 1
    assert str(caught.value).startswith("job spec #1: ")
    assert rule in str(caught.value)
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_enqueue__limits_themselves_are_accepted() -> None:
    Job.objects.enqueue("k" * 255, queue="q" * 255, priority=1, max_attempts=1, tags=["t" * 255] * 32)
    Job.objects.enqueue("noop", priority=4, max_attempts=1000, args={"s": "\\u0000 is not a NUL"})

    assert Job.objects.count() == 2
    assert Job.objects.filter(args__s="\\u0000 is not a NUL").exists()


@pytest.mark.django_db
def test_enqueue__tuples_and_nested_values_are_stored_as_json() -> None:
    job = Job.objects.enqueue("noop", {"pair": (1, 2), "nested": {"list": [{"a": None}], "f": 1.5, "b": True}})

    assert Job.objects.get(pk=job.pk).args == {"pair": [1, 2], "nested": {"list": [{"a": None}], "f": 1.5, "b": True}}


@pytest.mark.django_db
@override_settings(AWA={"MAX_TAGS": 2, "MAX_TAG_LENGTH": 3})
def test_enqueue__tag_limits_follow_settings() -> None:
    with pytest.raises(InvalidJobError, match="has 3 tags; the limit is 2"):
        Job.objects.enqueue("noop", tags=["a", "b", "c"])
    with pytest.raises(InvalidJobError, match="at most 3 characters"):
        Job.objects.enqueue("noop", tags=["abcd"])

    Job.objects.enqueue("noop", tags=["abc", "d"])
    assert Job.objects.count() == 1


@pytest.mark.django_db
@override_settings(AWA={"MAX_TAG_LENGTH": 1000})
def test_settings__max_tag_length_past_the_tags_column_is_refused_before_postgres_sees_a_tag() -> None:
    # tags is varchar(255)[]: a 300-character tag that the setting let through failed in Postgres
    # (a DataError naming no setting) and broke the caller's transaction.
    from awa_django.checks import check_settings
    from awa_django.conf import InvalidSettingsError

    assert [m.id for m in check_settings() if "MAX_TAG_LENGTH" in m.msg and "255" in m.msg] == ["awa.E006"]
    with transaction.atomic():
        with pytest.raises(InvalidSettingsError, match=r"MAX_TAG_LENGTH.*at most 255"):
            Job.objects.enqueue("noop", tags=["t" * 300])
        with connection.cursor() as cursor:  # the transaction is still usable
            cursor.execute("SELECT count(*) FROM awa_job")
            assert cursor.fetchone() == (0,)


@pytest.mark.django_db
@override_settings(USE_TZ=False)
def test_enqueue__naive_run_at_is_accepted_when_use_tz_is_off() -> None:
    run_at = datetime.now() + timedelta(hours=1)  # naive: USE_TZ is off

    job = Job.objects.enqueue("noop", run_at=run_at)

    assert job.state == "scheduled"


@pytest.mark.django_db
def test_enqueue__an_invalid_call_inside_a_transaction_leaves_it_usable() -> None:
    with transaction.atomic():
        kept = Job.objects.enqueue("noop")
        with pytest.raises(InvalidJobError):
            Job.objects.enqueue("noop", priority=9)
        also_kept = Job.objects.enqueue("noop")

    assert set(Job.objects.values_list("pk", flat=True)) == {kept.pk, also_kept.pk}


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    run_at=st.one_of(
        st.datetimes(timezones=st.timezones()),
        st.sampled_from([-14, -5, 0, 5, 14]).flatmap(
            lambda hours: st.sampled_from(
                [
                    datetime(1, 1, 1, tzinfo=dt_timezone(timedelta(hours=hours))),
                    datetime(1, 1, 2, 3, tzinfo=dt_timezone(timedelta(hours=hours))),
                    datetime(9999, 12, 30, 20, tzinfo=dt_timezone(timedelta(hours=hours))),
                    datetime(9999, 12, 31, 23, tzinfo=dt_timezone(timedelta(hours=hours))),
                ]
            )
        ),
    )
)
def test_enqueue__every_run_at_accepted_reads_back(run_at: datetime) -> None:
    """Whatever aware run_at enqueue accepts, the row reads back (through psycopg, as the worker's
    claim reads it) as the same instant; what it refuses lies outside the range it names."""
    with transaction.atomic():
        try:
            job = Job.objects.enqueue("noop", run_at=run_at)
        except InvalidJobError as exc:
            assert exc.field == "run_at"
            assert "outside the times" in str(exc)
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT run_at FROM awa_job WHERE id = %s", [job.id])
            (stored,) = cursor.fetchone()
        assert stored == run_at
        transaction.set_rollback(True)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    priority=st.one_of(st.integers(-3, 8), st.booleans()),
    max_attempts=st.one_of(st.integers(-2, 1003), st.sampled_from([1, 1000, 0, 1001, 32767, 32768])),
)
def test_enqueue__accepted_iff_priority_and_max_attempts_in_range(priority: int, max_attempts: int) -> None:
    in_range = (
        not isinstance(priority, bool)
        and not isinstance(max_attempts, bool)
        and 1 <= priority <= 4
        and 1 <= max_attempts <= 1000
    )
    with transaction.atomic():
        try:
            job = Job.objects.enqueue("noop", priority=priority, max_attempts=max_attempts)
        except InvalidJobError:
            accepted = False
        else:
            accepted = True
            assert (job.priority, job.max_attempts) == (priority, max_attempts)
        assert Job.objects.count() == int(accepted)
        transaction.set_rollback(True)

    assert accepted == in_range


@pytest.mark.django_db
def test_enqueue__run_at_now_is_not_in_the_future() -> None:
    job = Job.objects.enqueue("noop", run_at=timezone.now())

    assert job.state == "available"


# --- brief(): the repr every error message shows ------------------------------------------------

json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.sets(st.integers(), max_size=3),
    ),
    max_leaves=8,
)


@given(value=json_like)
def test_brief__short_values_read_exactly_as_repr(value: Any) -> None:
    if len(repr(value)) <= BRIEF_LENGTH // 2:
        assert brief(value) == repr(value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param("x" * 20_000_000, "…(20000000 characters)", id="20-MB-string"),
        pytest.param(["y" * 10_000_000] * 3, "…(10000000 characters)", id="list-of-big-strings"),
        pytest.param(DEEP, "[[[[[[…]]]]]]", id="10000-deep"),
        pytest.param(LOOP, "[[[[[[…]]]]]]", id="contains-itself"),
        pytest.param(BIG_INT, "<int of 16610 bits>", id="5000-digit-int"),
        pytest.param(list(range(1_000_000)), "…(1000000 items)", id="a-million-items"),
    ],
)
def test_brief__large_values_are_cut(value: Any, shown: str) -> None:
    text = brief(value)

    assert shown in text
    assert len(text) < 2 * BRIEF_LENGTH


def test_brief__a_repr_that_raises_gets_a_placeholder() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert brief({"a": Broken()}) == "{'a': <test_brief__a_repr_that_raises_gets_a_placeholder.<locals>.Broken object>}"


@pytest.mark.django_db
def test_enqueue__limits_are_inclusive() -> None:
    """MAX_JSON_DEPTH levels and MAX_JSON_BYTES of text are stored; one more is refused."""
    at_depth = {"d": _nested(MAX_JSON_DEPTH - 2)}  # the args object is level 1, "d"'s list level 2 …
    Job.objects.enqueue("noop", at_depth)
    with pytest.raises(InvalidJobError, match="deeper than"):
        Job.objects.enqueue("noop", {"d": _nested(MAX_JSON_DEPTH - 1)})

    overhead = len('{"b":""}')
    Job.objects.enqueue("noop", {"b": "x" * (MAX_JSON_BYTES - overhead)})
    with pytest.raises(InvalidJobError, match="the limit is"):
        Job.objects.enqueue("noop", {"b": "x" * (MAX_JSON_BYTES - overhead + 1)})

    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_enqueue__caller_transaction_stays_usable_after_each_poison_value() -> None:
    """Each input the issue lists, in one transaction: every refusal leaves it usable."""
    poison: list[dict[str, Any]] = [
        {"args": {"s": "\udce9"}},
        {"metadata": {"s": "\ud800"}},
        {"kind": "k\udce9"},
        {"queue": "q\udce9"},
        {"tags": ["\udce9"]},
        {"args": {"s": StrSub("\x00")}},
        {"args": {"l": ListSub(["\x00"])}},
        {"args": {"deep": DEEP}},
        {"args": {"n": BIG_INT}},
        {"unique": {"by_period": 10**400}},
        {"tags": {"a": 1}},
    ]
    with transaction.atomic():
        kept = [Job.objects.enqueue("noop").pk]
        for kwargs in poison:
            call = {"kind": "noop", **kwargs}
            with pytest.raises(InvalidJobError):
                Job.objects.enqueue(call.pop("kind"), **call)
            with pytest.raises(InvalidJobError) as caught:
                Job.objects.enqueue_many([{"kind": "noop"}, {"kind": "noop", **kwargs}])
            assert caught.value.index == 1
            kept.append(Job.objects.enqueue("noop").pk)

    assert sorted(Job.objects.values_list("pk", flat=True)) == sorted(kept)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "kwargs", "rule"),
    [
        pytest.param((DEEP,), {}, "too deep", id="10000-deep"),
        pytest.param(("caf\udce9",), {}, "lone surrogate", id="lone-surrogate"),
        pytest.param((), {"n": BIG_INT}, "too many digits", id="5000-digit-int"),
        pytest.param((StrSub("a\x00"),), {}, "NUL", id="nul-in-str-subclass"),
    ],
)
def test_tasks_backend__poison_task_arguments_are_invalid_job_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], rule: str
) -> None:
    from tests.tasks.tasks import echo

    with transaction.atomic():
        with pytest.raises(InvalidJobError, match=rule) as caught:
            echo.enqueue(*args, **kwargs)
        assert len(str(caught.value)) < 3 * BRIEF_LENGTH
        assert Job.objects.count() == 0  # the transaction is still usable
