"""docs/how-to/celery.md, the page a Celery user reads first, stays true to the code.

The right-hand column of its mapping table cites awa_django names in backticks. Each must resolve
in the code, or the test fails naming the row: a public name (the ``__all__`` of the public
modules), an ``@job`` option (the decorator's signature) or an enqueue option, a setting
(``AWA["KEY"]``, in the settings declaration, with a value the settings accept), a model field
or ``JobContext`` attribute, a management command line its parser accepts, or an expression whose
attributes exist and whose calls take the keywords written. Its "no counterpart" table lists
Celery names that must not exist in awa_django under that name, and only that table may say that
something is planned, not built or not available.
"""

from __future__ import annotations

import ast
import functools
import inspect
import keyword
import re
import shlex
import typing
from importlib import import_module
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class
from django.core.management.base import CommandError
from django.test import override_settings

import awa_django
from awa_django.conf import SETTINGS, InvalidSettingsError, awa_settings
from awa_django.context import JobContext
from awa_django.models import Job, Queue
from awa_django.registry import JobHandler
from awa_django.workflows import Workflow
from tests.docs.support import page

PAGE = "how-to/celery.md"
MAPPING = "| Celery | awa_django |"
MISSING = "| Celery | in awa_django |"
SPAN = re.compile(r"`([^`]+)`")
ABSENCE = re.compile(r"\b(planned|not built|not (yet )?available|not yet)\b", re.IGNORECASE)
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")

# Modules whose names the page may cite bare: the public API (their ``__all__``, else every name
# without a leading underscore).
PUBLIC_MODULES = (
    "awa_django",
    "awa_django.workflows",
    "awa_django.workflows.waiting",
    "awa_django.testing",
    "awa_django.services",
    "awa_django.observability",
)
# What the page's placeholders stand for: ``job.wait(...)`` is a Job row, ``context`` a handler's
# JobContext, ``handler`` what ``@job`` returns, ``wf`` a Workflow.
ROOTS: dict[str, Any] = {
    "awa_django": awa_django,
    "Job": Job,
    "Queue": Queue,
    "job": Job,
    "context": JobContext,
    "handler": JobHandler,
    "wf": Workflow,
}


class UnresolvedError(LookupError):
    """A cited name the code does not have; the message says which part and where it was looked for."""


def table_lines(text: str, header: str) -> list[str]:
    """The row lines of the table under ``header``."""
    lines = text.splitlines()
    assert header in lines, f"{PAGE} has no table headed {header!r}"
    rows = []
    for line in lines[lines.index(header) + 2 :]:  # the header and its --- line
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def table(text: str, header: str) -> list[tuple[str, str]]:
    """The (left, right) cells of the two-column table under ``header``."""
    rows = []
    for line in table_lines(text, header):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 2, f"{PAGE}: a row of two cells, found {line!r}"
        rows.append((cells[0], cells[1]))
    return rows


@functools.cache
def public_names() -> dict[str, Any]:
    names: dict[str, Any] = {}
    for module_name in PUBLIC_MODULES:
        module = import_module(module_name)
        exported = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        names.update((name, getattr(module, name)) for name in exported)
    return names


def parameters(func: Any) -> set[str]:
    return set(inspect.signature(func).parameters)


@functools.cache
def options() -> frozenset[str]:
    """``@job``'s options and the enqueue call's: what a bare ``name=`` may cite."""
    return frozenset(parameters(awa_django.job) | parameters(Job.objects.enqueue)) - {"kind", "args"}


@functools.cache
def vocabulary() -> frozenset[str]:
    """Every name a bare identifier may cite."""
    fields = {f.name for model in (Job, Queue) for f in model._meta.get_fields()}
    context = {name for name in dir(JobContext) if not name.startswith("_")}
    return frozenset(public_names()) | options() | set(SETTINGS) | fields | context


def commands() -> set[str]:
    return {name for name, app in get_commands().items() if app == "awa_django"}


def _member(owner: Any, name: str, where: str) -> Any:
    """``owner.name``; a plain function found on a class stands for the method bound to an instance."""
    try:
        value = inspect.getattr_static(owner, name) if inspect.isclass(owner) else getattr(owner, name)
    except AttributeError:
        raise UnresolvedError(f"{where} has no attribute {name!r}") from None
    if inspect.isclass(owner):
        if isinstance(value, staticmethod):
            return value.__func__
        if isinstance(value, classmethod):
            return getattr(owner, name)
        if inspect.isfunction(value):
            return functools.partial(value, None)  # as bound: the instance is the placeholder
        if isinstance(value, property | functools.cached_property):
            return value
        return getattr(owner, name)
    return value


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _module_path(path: str) -> Any:
    """``awa_django.a.b.c``: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for index in range(cut, len(parts)):
            value = _member(value, parts[index], ".".join(parts[:index]))
        return value
    raise UnresolvedError(f"no module {path!r}")


def _returns(func: Any) -> Any:
    """The class a call returns (a class: itself; else its return annotation): what an attribute
    after the call is looked up on."""
    if inspect.isclass(func):
        return func
    target = func.func if isinstance(func, functools.partial) else func
    try:
        returned = typing.get_type_hints(target).get("return")
    except (NameError, TypeError):
        returned = None
    if not inspect.isclass(returned):
        raise UnresolvedError(f"{getattr(target, '__qualname__', target)}: no return annotation to follow")
    return returned


def _elided(arg: ast.expr) -> bool:
    """``*args``, or ``...`` standing for "the rest, as you like": counted as no argument."""
    return isinstance(arg, ast.Starred) or (isinstance(arg, ast.Constant) and arg.value is ...)


def _check_call(func: Any, call: ast.Call, text: str) -> None:
    """The call's positional count and keyword names fit the callee's signature."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        if inspect.isclass(func) and issubclass(func, BaseException) and not call.keywords:
            return  # an exception without an __init__ of its own: BaseException(*args)
        raise UnresolvedError(f"{text}: the callee has no signature to check") from None
    positional = [None for arg in call.args if not _elided(arg)]
    named = {kw.arg: None for kw in call.keywords if kw.arg is not None}
    try:
        signature.bind_partial(*positional, **named)
    except TypeError as exc:
        raise UnresolvedError(f"{text}: {exc} (the signature is {signature})") from None


def resolve(node: ast.expr, *, decorator: bool = False) -> Any:
    """The object an expression cited on the page names; UnresolvedError if the code has no such thing."""
    if isinstance(node, ast.Name):
        if not decorator and node.id in ROOTS:
            return ROOTS[node.id]
        if node.id in public_names():
            return public_names()[node.id]
        raise UnresolvedError(f"{node.id!r} is no public name of {', '.join(PUBLIC_MODULES)}")
    if isinstance(node, ast.Attribute):
        path = _dotted(node)
        if path is not None and path.startswith("awa_django."):
            return _module_path(path)
        owner = resolve(node.value, decorator=decorator)
        if isinstance(node.value, ast.Call):
            owner = _returns(owner)
        return _member(owner, node.attr, ast.unparse(node.value))
    if isinstance(node, ast.Call):
        # A call stands for its callee, checked against the arguments written; a call among its
        # arguments (`backoff=Backoff(...)`, `chain(step(...), ...)`) is checked too.
        func = resolve(node.func, decorator=decorator)
        _check_call(func, node, ast.unparse(node))
        for argument in [*node.args, *(kw.value for kw in node.keywords)]:
            for inner in ast.walk(argument):
                if isinstance(inner, ast.Call):
                    resolve(inner)
        return func
    if isinstance(node, ast.Await):
        return resolve(node.value)
    raise UnresolvedError(f"{ast.unparse(node)!r} is not a name, an attribute or a call")


SETTING = re.compile(r'^AWA\["(?P<key>[A-Z_]+)"\](?: = (?P<value>.+))?$')
OPTION = re.compile(r"^(?P<name>[a-z_]+)=(?P<value>.*)$")


def problem(span: str) -> str | None:
    """Why the code has nothing ``span`` cites, or None when it does."""
    text = span.strip()
    if all(word in keyword.kwlist for word in text.split()):
        return None  # `def`, `async def`: Python's words, not ours
    words = text.split()
    if words[0] in commands():
        parser = load_command_class("awa_django", words[0]).create_parser("manage.py", words[0])
        try:
            parser.parse_args(shlex.split(text)[1:])
        except CommandError as exc:
            return f"{words[0]} refuses {text!r}: {exc}"
        return None
    if match := SETTING.match(text):
        key = match["key"]
        if key not in SETTINGS:
            return f"no setting AWA[{key!r}] in awa_django.conf"
        if match["value"] is not None:
            with override_settings(AWA={key: ast.literal_eval(match["value"])}):
                try:
                    awa_settings()
                except InvalidSettingsError as exc:
                    return f"AWA[{key!r}] = {match['value']} is refused: {exc}"
        return None
    if (match := OPTION.match(text)) and "(" not in match["name"]:
        name = match["name"]
        return None if name in options() else f"{name}= is neither an @job option nor an enqueue option"
    decorator = text.startswith("@")
    text = text.removeprefix("@").removeprefix("raise ").strip()
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"{span!r} is not Python: cite a name, an option, a setting or a command line"
    if isinstance(tree, ast.Name) and not decorator:
        return None if tree.id in vocabulary() else f"{tree.id!r} is not a name awa_django has"
    try:
        resolve(tree, decorator=decorator)
    except UnresolvedError as exc:
        return str(exc)
    return None


def spans(cell: str) -> list[str]:
    return SPAN.findall(cell)


def test_mapping_table__every_name_it_cites_exists_in_the_code() -> None:
    rows = table(page(PAGE), MAPPING)

    assert len(rows) >= 30
    unresolved = [(celery, span, why) for celery, ours in rows for span in spans(ours) if (why := problem(span))]
    assert unresolved == []


def test_mapping_table__maps_canvas_blocking_results_retry_rules_and_time_limits() -> None:
    """What the page once called planned, though built (issue 47): each is on the page by its name."""
    cited = {
        name for _, ours in table(page(PAGE), MAPPING) for span in spans(ours) for name in IDENTIFIER.findall(span)
    }

    expected = {"chain", "group", "chord", "Workflow", "wait", "await_result", "retry_on", "discard_on", "timeout"}
    assert expected - cited == set()


def test_mapping_table__no_row_says_planned_or_not_built() -> None:
    rows = table(page(PAGE), MAPPING)

    assert [row for row in rows if ABSENCE.search(" ".join(row))] == []


def test_no_counterpart_table__its_celery_names_do_not_exist_in_awa_django() -> None:
    rows = table(page(PAGE), MISSING)

    assert rows
    existing = [span for celery, _ in rows for span in spans(celery) if problem(span) is None]
    assert existing == [], "built since: move these rows into the mapping table"
    unresolved = [(celery, span, why) for celery, ours in rows for span in spans(ours) if (why := problem(span))]
    assert unresolved == []


def test_page__says_what_is_missing_only_in_the_no_counterpart_table() -> None:
    """Prose cannot be checked name by name: "canvas is planned, not built" stood there while it was
    built. What is missing goes in the table, whose Celery names are checked above."""
    text = page(PAGE)
    checked = set(table_lines(text, MISSING))

    assert [line for line in text.splitlines() if ABSENCE.search(line) and line not in checked] == []


@pytest.mark.parametrize(
    "span",
    [
        "@job(..., retry_onn=(ValueError,))",  # a renamed @job option
        "retry_onn=",
        "Job.objects.enqueu(**args)",
        "awa_django.services.cancel_job([id])",
        "awa_django.workflows.chian(step('a'), step('b'))",
        "chord(header, body, polcy='always')",
        "context.cancelld",
        "job.wait(timeot=30)",
        "handler.using(queue='q').enqueue_later(x=1)",
        'AWA["HEARTBEAT_STALENES"]',
        'AWA["EXECUTION"] = "eager"',
        "awa_worker -q a --no-such-flag",
        "max_attempt",
        "raise RetryAftr(5)",
        "COPY",
    ],
)
def test_problem__a_renamed_or_removed_name_is_reported(span: str) -> None:
    assert problem(span) is not None


@pytest.mark.parametrize(
    "span",
    [
        "@job(..., retry_on=(ValueError,), timeout=2)",
        "handler.using(queue='q', run_at=None).enqueue(x=1)",
        "await job.await_result(timeout=30)",
        'AWA["EXECUTION"] = "immediate"',
        "awa_worker -q a -q b",
        "context.set_progress({...})",
        "awa_django.workflows.services.cancel_workflow(id)",
        "max_attempts",
        "async def",
    ],
)
def test_problem__a_name_the_code_has_resolves(span: str) -> None:
    assert problem(span) is None
