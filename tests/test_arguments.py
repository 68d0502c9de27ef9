"""The call-site argument check accepts exactly what a call of the handler accepts (plus the
simple-type rule, and minus positional-only names given by name), for any signature and any args
dict: a property test against Python's own call."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from awa_django.arguments import ArgsCheck, type_test
from awa_django.exceptions import InvalidJobError

P = inspect.Parameter
NAMES = ["a", "b", "c", "d", "e"]


class Custom:
    pass


# annotation -> does a value fit (written as a table, apart from the module's own rule)
ANNOTATIONS: dict[str, tuple[Any, Any]] = {
    "none": (P.empty, lambda v: True),
    "int": (int, lambda v: type(v) is int),
    "str": (str, lambda v: type(v) is str),
    "bool": (bool, lambda v: type(v) is bool),
    "float": (float, lambda v: type(v) in (int, float)),
    "list": (list, lambda v: type(v) in (list, tuple)),
    "list[int]": (list[int], lambda v: type(v) in (list, tuple)),
    "dict": (dict, lambda v: type(v) is dict),
    "int|None": (int | None, lambda v: v is None or type(v) is int),
    "bool|str": (bool | str, lambda v: type(v) in (bool, str)),
    "custom": (Custom, lambda v: True),  # not a simple type: not checked
    "custom|None": (Custom | None, lambda v: True),
}
VALUES = st.one_of(
    st.integers(-3, 3),
    st.booleans(),
    st.text(max_size=2),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.dictionaries(st.text(max_size=1), st.integers(), max_size=1),
)


@st.composite
def signatures(draw: st.DrawFn) -> tuple[inspect.Signature, dict[str, Any], bool]:
    """A valid signature over NAMES (positional-only, then positional-or-keyword, *args,
    keyword-only, **kwargs, defaults where Python allows them), its annotations, and whether the
    first positional parameter takes the JobContext."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5))
    parameters: list[inspect.Parameter] = []
    annotations: dict[str, Any] = {}
    takes_context = draw(st.booleans())
    if takes_context:
        parameters.append(P("context", P.POSITIONAL_OR_KEYWORD))
    kinds = sorted(
        (draw(st.sampled_from([P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY])) for _ in names),
    )
    if takes_context and kinds and kinds[0] is P.POSITIONAL_ONLY:
        parameters[0] = P("context", P.POSITIONAL_ONLY)
    defaulted = False
    var_positional = draw(st.booleans())
    for name, kind in zip(names, kinds, strict=True):
        if var_positional and kind is P.KEYWORD_ONLY and not any(p.kind is P.VAR_POSITIONAL for p in parameters):
            parameters.append(P("args", P.VAR_POSITIONAL))
        has_default = draw(st.booleans()) or (defaulted and kind is not P.KEYWORD_ONLY)
        defaulted = defaulted or (has_default and kind is not P.KEYWORD_ONLY)
        label = draw(st.sampled_from(sorted(ANNOTATIONS)))
        annotation = ANNOTATIONS[label][0]
        if annotation is not P.empty:
            annotations[name] = annotation
        parameters.append(P(name, kind, default=0 if has_default else P.empty, annotation=annotation))
    if var_positional and not any(p.kind is P.VAR_POSITIONAL for p in parameters):
        parameters.append(P("args", P.VAR_POSITIONAL))
    if draw(st.booleans()):
        parameters.append(P("kwargs", P.VAR_KEYWORD))
    return inspect.Signature(parameters), annotations, takes_context


def handler_with(signature: inspect.Signature, annotations: dict[str, Any]) -> Any:
    def handler(*args: Any, **kwargs: Any) -> None:
        return None

    handler.__signature__ = signature  # type: ignore[attr-defined]
    handler.__annotations__ = annotations
    return handler


def fits(annotation: Any, value: object) -> bool:
    for _label, (candidate, test) in ANNOTATIONS.items():
        if candidate == annotation:
            return bool(test(value))
    raise AssertionError(annotation)


def calls(signature: inspect.Signature, args: dict[str, Any], takes_context: bool) -> bool:
    """Whether Python itself accepts the call ``handler(**args)`` (after the context, when it takes
    one): a real function with ``signature`` (annotations left out), called. The oracle is the call,
    not ``signature.bind``: 3.13.0's bind accepts ``(a, /, **kwargs)`` with ``{'a': None}``, a call
    Python refuses (``a`` goes into ``kwargs`` and the positional-only ``a`` is missing)."""
    plain = signature.replace(
        parameters=[p.replace(annotation=P.empty) for p in signature.parameters.values()],
        return_annotation=P.empty,
    )
    namespace: dict[str, Any] = {}
    exec(f"def handler{plain}:\n    return None", namespace)  # a signature the test drew, no outside text
    try:
        namespace["handler"](*([None] if takes_context else []), **args)
    except TypeError:
        return False
    return True


@given(
    drawn=signatures(),
    args=st.dictionaries(st.sampled_from([*NAMES, "context", "args", "kwargs", "zz"]), VALUES, max_size=5),
)
# hypothesis' find on Python 3.13: bind() there accepted this, a call Python refuses (see ``calls``).
@example(
    drawn=(
        inspect.Signature([P("a", P.POSITIONAL_ONLY, annotation=bool), P("kwargs", P.VAR_KEYWORD)]),
        {"a": bool},
        False,
    ),
    args={"a": None},
)
@example(
    drawn=(
        inspect.Signature([P("a", P.POSITIONAL_ONLY, default=0, annotation=bool), P("kwargs", P.VAR_KEYWORD)]),
        {"a": bool},
        False,
    ),
    args={"a": None},
)
def test_args_check__accepts_exactly_what_the_signature_binds_with_fitting_simple_types(
    drawn: tuple[inspect.Signature, dict[str, Any], bool], args: dict[str, Any]
) -> None:
    signature, annotations, takes_context = drawn
    check = ArgsCheck.of(handler_with(signature, annotations), takes_context=takes_context)
    positional_only = {name for name, p in signature.parameters.items() if p.kind is P.POSITIONAL_ONLY}
    # A positional-only name (the JobContext's too) given by name is refused even where Python
    # would let a **kwargs take it: the worker's bind() refuses it on 3.11 and 3.12, and the name
    # would reach **kwargs, not the parameter the handler named (see ArgsCheck.problem).
    binds = calls(signature, args, takes_context) and positional_only.isdisjoint(args)
    binds = binds and not (takes_context and "context" in args)
    if binds:
        binds = all(
            fits(annotations[name], value)
            for name, value in args.items()
            if name in annotations and signature.parameters[name].kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
        )

    assert (check.problem(args) is None) == binds, check.problem(args)


def test_args_check__context_without_a_positional_parameter__refused_at_reading() -> None:
    def handler(*, user_id: int) -> None:
        return None

    with pytest.raises(TypeError, match="no positional parameter for the JobContext"):
        ArgsCheck.of(handler, takes_context=True)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"uid": 1}, "unknown argument(s) ['uid']"),
        ({}, "missing required argument(s) ['user_id']"),
        ({"user_id": True}, "argument 'user_id' is bool True, not int"),
        ({"user_id": "1"}, "argument 'user_id' is str '1', not int"),
        ({"user_id": 1, "note": 3}, "argument 'note' is int 3, not str | None"),
    ],
)
def test_args_check__error_names_the_kind_the_names_and_the_signature(args: dict[str, Any], expected: str) -> None:
    def send_welcome(user_id: int, note: str | None = None) -> None:
        return None

    with pytest.raises(InvalidJobError) as raised:
        ArgsCheck.of(send_welcome).check("send_welcome", args, index=4)

    message = str(raised.value)
    assert expected in message
    assert "'send_welcome'" in message and "send_welcome(user_id: int, note: str | None = None) -> None" in message
    assert message.startswith("job spec #4: ")


def test_type_test__bool_is_not_an_int_and_an_int_is_a_float() -> None:
    as_int, as_float = type_test(int), type_test(float)
    assert as_int is not None and as_float is not None
    assert not as_int.accepts(True) and as_int.accepts(3)
    assert as_float.accepts(3) and as_float.accepts(2.5) and not as_float.accepts(False)
    assert type_test(Custom) is None and type_test(Custom | None) is None
