"""A job's fairness key, set at every enqueue door or derived by its kind's ``@job(fair_key=)``.

Every door (``enqueue``, ``aenqueue``, both ``enqueue_many`` paths, ``handler.using(...)`` sync and
async) stores the key it is given, applies the kind's derived key when given none (an explicit key
wins, ``""`` included), and refuses a bad key, or a rule that fails, before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.defaults import FAIR_KEY_MAX_LENGTH
from awa_django.exceptions import InvalidJobError
from awa_django.jobspec import check_fair_key, fair_key_problem
from awa_django.models import Job
from awa_django.registry import JobHandler, RegistryError, job, registry

DERIVED = "test_fk_derived"  # @job(fair_key=lambda args: f"tenant:{args['tenant_id']}")
CONSTANT = "test_fk_constant"  # @job(fair_key="reports")
PLAIN = "test_fk_plain"  # no rule
TIMED = "test_fk_timed"  # a rule and a timeout: the bulk fast path's line without a shared frame

Door = Callable[[str, dict[str, Any], dict[str, Any]], None]


def _enqueue(kind: str, args: dict[str, Any], options: dict[str, Any]) -> None:
    Job.objects.enqueue(kind, args, **options)


def _aenqueue(kind: str, args: dict[str, Any], options: dict[str, Any]) -> None:
    async_to_sync(Job.objects.aenqueue)(kind, args, **options)


def _many_plain(kind: str, args: dict[str, Any], options: dict[str, Any]) -> None:
    Job.objects.enqueue_many([{"kind": "noop"}, {"kind": kind, "args": args, **options}])


def _many_full(kind: str, args: dict[str, Any], options: dict[str, Any]) -> None:
    Job.objects.enqueue_many([{"kind": "noop"}, {"kind": kind, "args": args, "tags": ["t"], **options}])


def _handler_using(kind: str, args: dict[str, Any], options: dict[str, Any]) -> None:
    handler = registry.registered(kind)
    assert isinstance(handler, JobHandler)
    (handler.using(**options) if options else handler).enqueue(**args)


def _handler_ausing(kind: str, args: dict[str, Any], options: dict[str, Any]) -> None:
    handler = registry.registered(kind)
    assert isinstance(handler, JobHandler)
    async_to_sync((handler.using(**options) if options else handler).aenqueue)(**args)


DOORS: dict[str, Door] = {
    "enqueue": _enqueue,
    "aenqueue": _aenqueue,
    "enqueue_many_plain": _many_plain,
    "enqueue_many_full": _many_full,
    "handler_using": _handler_using,
    "handler_using_async": _handler_ausing,
}
doors = pytest.mark.parametrize("door", list(DOORS.values()), ids=list(DOORS))


@pytest.fixture
def kinds() -> Iterator[None]:
    @job(DERIVED, fair_key=lambda args: f"tenant:{args['tenant_id']}")
    def derived(tenant_id: int) -> None:
        return None

    @job(CONSTANT, fair_key="reports")
    def constant(tenant_id: int) -> None:
        return None

    @job(PLAIN)
    def plain(tenant_id: int) -> None:
        return None

    @job(TIMED, timeout=5, fair_key=lambda args: f"t{args['tenant_id']}")
    def timed(tenant_id: int) -> None:
        return None

    try:
        yield
    finally:
        for kind in (DERIVED, CONSTANT, PLAIN, TIMED):
            registry.unregister(kind)


def stored_keys(kind: str) -> list[str]:
    return list(Job.objects.filter(kind=kind).values_list("fair_key", flat=True))


@pytest.mark.django_db(transaction=True)
@doors
@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        (PLAIN, {}, ""),
        (PLAIN, {"fair_key": "tenant:9"}, "tenant:9"),
        (PLAIN, {"fair_key": "tab\there, back\\slash,\nnew line"}, "tab\there, back\\slash,\nnew line"),
        (PLAIN, {"fair_key": "ключ:ü"}, "ключ:ü"),
        (DERIVED, {}, "tenant:7"),
        (DERIVED, {"fair_key": "explicit"}, "explicit"),
        (DERIVED, {"fair_key": ""}, ""),  # an explicit default key wins over the rule too
        (CONSTANT, {}, "reports"),
        (CONSTANT, {"fair_key": "mine"}, "mine"),
        (TIMED, {}, "t7"),
        (TIMED, {"fair_key": "x"}, "x"),
    ],
    ids=["none", "given", "copy-escapes", "non-ascii", "derived", "explicit-wins", "explicit-empty-wins",
         "constant", "constant-overridden", "timed-derived", "timed-given"],
)  # fmt: skip
def test_every_door__stores_the_given_else_the_derived_else_the_default_key(
    kinds: None, door: Door, kind: str, options: dict[str, Any], expected: str
) -> None:
    door(kind, {"tenant_id": 7}, options)

    assert stored_keys(kind) == [expected]
    assert set(stored_keys("noop")) <= {""}  # the neighbour spec of the bulk doors keeps the default key


BAD_KEYS = [
    (42, "must be a str, not int"),
    (b"tenant", "must be a str, not bytes"),
    ("x" * (FAIR_KEY_MAX_LENGTH + 1), f"is {FAIR_KEY_MAX_LENGTH + 1} characters long; the limit is 128"),
    ("ten\x00ant", "NUL character"),
    ("ten\ud800ant", "lone surrogate"),
]


@pytest.mark.django_db(transaction=True)
@doors
@pytest.mark.parametrize(("bad", "says"), BAD_KEYS, ids=["int", "bytes", "too-long", "nul", "surrogate"])
def test_every_door__a_bad_key_is_refused_naming_it_and_nothing_is_written(
    kinds: None, door: Door, bad: object, says: str
) -> None:
    with pytest.raises(InvalidJobError) as raised:
        door(PLAIN, {"tenant_id": 1}, {"fair_key": bad})

    assert raised.value.field == "fair_key"
    assert says in str(raised.value) and "fair_key=" in str(raised.value)
    assert not Job.objects.filter(kind__in=[PLAIN, "noop"]).exists()


@pytest.mark.django_db(transaction=True)
@doors
@pytest.mark.parametrize(
    ("rule", "says"),
    [
        (lambda args: args["missing"], "raised KeyError('missing')"),
        (lambda args: 42, "42: returned by the fair_key rule of job 'test_fk_rules' for args {'tenant_id': 1}"),
        (lambda args: "k" * 200, "is 200 characters long"),
        (lambda args: "a\x00b", "NUL character"),
    ],
    ids=["raises", "not-a-str", "too-long", "nul"],
)
def test_every_door__a_rule_that_fails__refused_naming_the_kind_nothing_written(
    door: Door, rule: Callable[[dict[str, Any]], str], says: str
) -> None:
    @job("test_fk_rules", fair_key=rule)
    def ruled(tenant_id: int) -> None:
        return None

    try:
        with pytest.raises(InvalidJobError) as raised:
            door("test_fk_rules", {"tenant_id": 1}, {})
        message = str(raised.value)
        assert raised.value.field == "fair_key"
        assert "'test_fk_rules'" in message and says in message, message
        assert not Job.objects.filter(kind__in=["test_fk_rules", "noop"]).exists()
        door("test_fk_rules", {"tenant_id": 1}, {"fair_key": "given"})  # an explicit key never calls the rule
        assert stored_keys("test_fk_rules") == ["given"]
    finally:
        registry.unregister("test_fk_rules")


@pytest.mark.django_db
def test_enqueue_many__spec_index_named_and_keys_mixed_in_one_call_kept_in_order(kinds: None) -> None:
    specs: list[dict[str, Any]] = [
        {"kind": DERIVED, "args": {"tenant_id": n}, **({"fair_key": "vip"} if n % 3 == 0 else {})} for n in range(9)
    ]
    with pytest.raises(InvalidJobError, match=r"job spec #4: fair_key='x{129}': is 129 characters long"):
        Job.objects.enqueue_many([*specs[:4], {"kind": PLAIN, "args": {"tenant_id": 1}, "fair_key": "x" * 129}])

    assert Job.objects.enqueue_many(specs) == 9
    rows = Job.objects.filter(kind=DERIVED).order_by("id").values_list("args", "fair_key")
    assert [key for _, key in rows] == ["vip" if n % 3 == 0 else f"tenant:{n}" for n in range(9)]


def test_job__a_rule_that_is_neither_a_str_nor_callable__refused_at_declaration() -> None:
    with pytest.raises(InvalidJobError, match=r"fair_key=42: job 'test_fk_bad_rule': must be a str or a callable"):
        job("test_fk_bad_rule", fair_key=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="NUL character"):
        job("test_fk_bad_rule", fair_key="a\x00")

    assert "test_fk_bad_rule" not in registry


def test_handler_using__a_bad_key__refused_where_it_is_written(kinds: None) -> None:
    handler = registry.registered(PLAIN)
    assert isinstance(handler, JobHandler)
    with pytest.raises(InvalidJobError, match=r"fair_key=7: must be a str, not int"):
        handler.using(fair_key=7)


def test_job__registry_error_type_unchanged_for_other_mistakes() -> None:
    with pytest.raises(RegistryError):
        job("test_fk_args_without_cron", args={"a": 1}, fair_key="k")


# --- the rule, as a property --------------------------------------------------------------------


def _expected_ok(value: object) -> bool:
    if not isinstance(value, str) or len(value) > FAIR_KEY_MAX_LENGTH or "\x00" in value:
        return False
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)


keys = st.one_of(
    st.text(max_size=FAIR_KEY_MAX_LENGTH + 8),  # any code point, surrogates and NUL included
    st.text(st.characters(codec="utf-8"), min_size=FAIR_KEY_MAX_LENGTH - 2, max_size=FAIR_KEY_MAX_LENGTH + 2),
    st.integers(),
    st.binary(max_size=4),
    st.none(),
    st.lists(st.text(max_size=2), max_size=2),
)


@given(value=keys)
def test_check_fair_key__accepts_exactly_short_storable_strings(value: object) -> None:
    if _expected_ok(value):
        assert check_fair_key(value) == value and fair_key_problem(value) is None
    else:
        with pytest.raises(InvalidJobError) as raised:
            check_fair_key(value)
        assert raised.value.field == "fair_key" and raised.value.value is value


stored = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=FAIR_KEY_MAX_LENGTH)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=stored, bulk=st.booleans())
@pytest.mark.django_db
def test_enqueue__every_accepted_key_is_stored_exactly(key: str, bulk: bool) -> None:
    if bulk:
        Job.objects.enqueue_many([{"kind": "test_fk_prop", "fair_key": key}])
    else:
        Job.objects.enqueue("test_fk_prop", fair_key=key)

    assert stored_keys("test_fk_prop") == [key]
    Job.objects.filter(kind="test_fk_prop").delete()
