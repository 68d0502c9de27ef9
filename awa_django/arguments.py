"""A handler's arguments, checked at the call site: the rule ``enqueue`` applies before writing.

A job's args reach its handler as keyword arguments (``handler(**args)``, after a ``JobContext``
for ``takes_context=True``). ``ArgsCheck.of(func)`` reads the handler's signature once, when it
registers, and keeps what the check needs: the names a keyword may bind, the ones that must be
given, whether ``**kwargs`` takes the rest, and a type test for each parameter annotated with a
simple type. ``problem(args)`` is then a few set operations: it accepts exactly the dicts with
which Python itself can call ``func(**args)`` (with the context passed first), except that a
positional-only name given by name is refused even where ``**kwargs`` would take it (the handler
would not get it under the name it gave; ``inspect``'s bind, which the worker asks, refuses it on
3.11 and 3.12, and 3.13.0's bind is no guide: it accepts ``(a, /, **kwargs)`` with ``{"a": 1}``,
a call Python refuses), and, where a
parameter is annotated ``int``, ``str``, ``bool``, ``float``, ``list``, ``dict``, ``None`` or a
union of those (``int | None``), a value of that type. The type test checks, never converts:
``True`` is not an ``int``, ``"1"`` is not an ``int``; an ``int`` is a ``float`` (JSON has one
number type); a tuple is a ``list`` (JSON stores it as one). Any other annotation is not checked.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from awa_django.exceptions import InvalidJobError
from awa_django.validation import brief

_SIMPLE: dict[Any, tuple[type, ...]] = {
    int: (int,),
    str: (str,),
    bool: (bool,),
    float: (int, float),
    list: (list, tuple),
    dict: (dict,),
    type(None): (type(None),),
    None: (type(None),),
}
_NAMES = {int: "int", str: "str", bool: "bool", float: "float", list: "list", dict: "dict", type(None): "None"}


@dataclass(frozen=True, slots=True)
class TypeTest:
    """The Python types a parameter's simple annotation allows, and how the annotation reads."""

    types: tuple[type, ...]
    bool_ok: bool  # bool is an int subclass: allowed only where the annotation names bool
    text: str
    exact: frozenset[type] = frozenset()  # the types accepted as they are (the fast look-up)

    def __post_init__(self) -> None:
        object.__setattr__(self, "exact", frozenset(self.types) if self.bool_ok else frozenset(self.types) - {bool})

    def accepts(self, value: object) -> bool:
        if type(value) is bool:
            return self.bool_ok
        return isinstance(value, self.types)


def type_test(annotation: object) -> TypeTest | None:
    """The test of a simple annotation (see the module docstring), or None: not checked."""
    origin = typing.get_origin(annotation)
    members: tuple[Any, ...]
    if origin is typing.Union or origin is types.UnionType:
        members = typing.get_args(annotation)
    else:
        members = (annotation,)
    allowed: list[type] = []
    names: list[str] = []
    for member in members:
        base = typing.get_origin(member) or member  # list[int] is checked as list
        if base not in _SIMPLE:
            return None  # one member the rule does not cover: leave the whole annotation alone
        allowed.extend(_SIMPLE[base])
        names.append(_NAMES[type(None) if base is None else base])
    return TypeTest(tuple(dict.fromkeys(allowed)), bool in allowed, " | ".join(names))


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """The handler's annotations resolved (``from __future__ import annotations`` leaves text);
    none when they cannot be (a name only a ``TYPE_CHECKING`` import defines): no type test then."""
    try:
        return typing.get_type_hints(func)
    except Exception:
        return {}


@dataclass(frozen=True, slots=True)
class ArgsCheck:
    """What a handler's signature accepts as keyword arguments, read once from the signature."""

    text: str  # the handler as it reads: send_welcome(user_id: int)
    keywords: frozenset[str]  # names a keyword binds to
    required: frozenset[str]  # names without a default, which must be given
    positional_only: frozenset[str]  # names that cannot be given by keyword (and the context's)
    var_keyword: bool  # **kwargs takes any other name
    never: str | None  # why no args dict at all can call it (a required positional-only parameter)
    tests: tuple[tuple[str, TypeTest], ...]  # (name, test) for the annotated parameters
    required_order: tuple[str, ...] = ()  # ``required`` as a tuple: looping it is the cheap test
    tests_by_name: dict[str, TypeTest] = field(default_factory=dict)  # ``tests`` as a look-up

    def __post_init__(self) -> None:
        object.__setattr__(self, "required_order", tuple(sorted(self.required)))
        object.__setattr__(self, "tests_by_name", dict(self.tests))

    @classmethod
    def of(cls, func: Callable[..., Any], *, takes_context: bool = False) -> ArgsCheck:
        """Read ``func``'s signature; with ``takes_context`` its first positional parameter is the
        context. Raises TypeError when the signature has no place for the context."""
        try:  # annotations as the code reads them, not as strings (``from __future__ import annotations``)
            signature = inspect.signature(func, eval_str=True)
        except Exception:
            signature = inspect.signature(func)
        parameters = list(signature.parameters.values())
        context = None
        if takes_context:
            if not parameters or parameters[0].kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.VAR_POSITIONAL,
            ):
                raise TypeError(
                    f"{func.__qualname__}{signature} takes no positional parameter for the JobContext; "
                    "make the context its first parameter, or drop takes_context=True"
                )
            if parameters[0].kind is not inspect.Parameter.VAR_POSITIONAL:
                context = parameters[0].name  # bound by position: the same name by keyword is refused
                parameters = parameters[1:]
        hints = _hints(func)
        keywords: set[str] = set()
        required: set[str] = set()
        positional_only: set[str] = set()
        var_keyword = False
        never = None
        tests: list[tuple[str, TypeTest]] = []
        if takes_context and context is not None:
            positional_only.add(context)
        for parameter in parameters:
            kind = parameter.kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                var_keyword = True
                continue
            if kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            if kind is inspect.Parameter.POSITIONAL_ONLY:
                positional_only.add(parameter.name)
                if parameter.default is inspect.Parameter.empty and never is None:
                    never = f"its parameter {parameter.name!r} is positional-only, and args are passed by name"
                continue
            keywords.add(parameter.name)
            if parameter.default is inspect.Parameter.empty:
                required.add(parameter.name)
            if parameter.name in hints:
                test = type_test(hints[parameter.name])
                if test is not None:
                    tests.append((parameter.name, test))
        return cls(
            f"{func.__qualname__}{signature}",
            frozenset(keywords),
            frozenset(required),
            frozenset(positional_only),
            var_keyword,
            never,
            tuple(tests),
        )

    def problem(self, args: Mapping[str, Any]) -> str | None:
        """Why ``args`` cannot call the handler, or None if they can.

        On the enqueue path, so the accepting case is a few C-level set comparisons and, per
        annotated parameter, one exact-type lookup; the reasons are worked out only on refusal.
        """
        if self.never is not None:
            return self.never
        keys = args.keys()
        if not self.var_keyword:
            if not self.keywords.issuperset(args):  # iterates the dict: cheaper than a keys view compare
                return f"unknown argument(s) {sorted(keys - self.keywords)}"
        elif self.positional_only and not self.positional_only.isdisjoint(keys):
            # bind() refuses a positional-only name given by keyword even where **kwargs could take
            # it, and the worker binds before it calls: refused here too.
            taken = sorted(self.positional_only & keys)
            return f"parameter(s) {taken} cannot be passed by name (positional-only, or the JobContext's)"
        for name in self.required_order:
            if name not in args:
                return f"missing required argument(s) {sorted(self.required - keys)}"
        tests = self.tests_by_name
        if tests:
            for name, value in args.items():  # the args given: usually fewer than the parameters
                test = tests.get(name)
                if test is not None and type(value) not in test.exact and not test.accepts(value):
                    return f"argument {name!r} is {type(value).__name__} {value!r:.80}, not {test.text}"
        return None

    def mismatch(self, kind: str, args: Mapping[str, Any]) -> str | None:
        """Why ``args`` cannot call the handler of ``kind``, as a sentence naming the argument and the
        handler (what a form error or a system check says), or None if they can."""
        problem = self.problem(args)
        if problem is None:
            return None
        return f"args {brief(dict(args))} do not match the handler of {kind!r}: {problem}; it is {self.text}"

    def error(self, kind: str, args: Mapping[str, Any], problem: str, index: int | None = None) -> InvalidJobError:
        """The InvalidJobError for ``problem``: it names the kind, the names and the signature."""
        return InvalidJobError(
            "args", dict(args), f"do not match the handler of {kind!r}: {problem}; it is {self.text}", index=index
        )

    def check(self, kind: str, args: Mapping[str, Any], index: int | None = None) -> None:
        """Raise InvalidJobError naming the kind, the bad or missing names and the signature."""
        problem = self.problem(args)
        if problem is not None:
            raise self.error(kind, args, problem, index)
