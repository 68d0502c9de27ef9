"""The worker's shape, checked from the source with ``ast`` (as tests/import_graph.py checks cycles):
a queue runner's state is written only by the runner; rows are decoded by name; job states are
named through ``awa_django.states``; the supervisor's docstring lists the tasks it starts; and
importing the models loads no worker code."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from awa_django.states import JobState
from tests.import_graph import PACKAGE_DIR

WORKER_DIR = PACKAGE_DIR / "worker"
RUNNER = WORKER_DIR / "runner.py"
# Where a claimed row becomes a job, an outcome becomes a write, or the leader reads its rows.
DECODING_MODULES = [
    *sorted(WORKER_DIR.glob("*.py")),
    PACKAGE_DIR / "context.py",
    *sorted((PACKAGE_DIR / "inline").glob("*.py")),
    PACKAGE_DIR / "testing" / "runner.py",
]
STATE_NAMES = {state.value for state in JobState}
ROW_NAMES = {"row", "r", "values", "record", "fetched"}  # what a fetched row is called here
# A literal that spells a state's name but names something else.
NOT_STATES = {
    ("snapshot.py", "available"),  # QueueSnapshot's count of permits a claim would get now
}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _runner_state() -> set[str]:
    """Every private attribute the runner module's classes set on ``self`` (their state; what they
    show of it are properties without setters, see the test below)."""
    return {
        node.attr
        for node in ast.walk(_tree(RUNNER))
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
    }


def _assigned_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                    if not (isinstance(part.value, ast.Name) and part.value.id == "self"):
                        found.append((part.lineno, part.attr))
    return found


def test_runner_state__is_private_and_read_only() -> None:
    tree = _tree(RUNNER)
    stored = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
    }
    setters = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)
    ]
    # QueueRunner's state: underscored, written only by its methods, with no setter to reach it.
    queue_runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "QueueRunner")
    own = {
        node.attr
        for node in ast.walk(queue_runner)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
    }
    assert own and all(name.startswith("_") for name in own), sorted(own)
    assert setters == []
    assert stored >= own


def test_runner_state__no_module_outside_the_runner_assigns_it() -> None:
    state = _runner_state()
    assert {"_backlog", "_claimed", "_bucket", "_source"} <= state
    writes = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path == RUNNER or "migrations" in path.parts:
            continue
        for line, attr in _assigned_attributes(_tree(path)):
            if attr in state:
                writes.append(f"{path.relative_to(PACKAGE_DIR)}:{line} assigns .{attr}")
    assert writes == []


def test_backlog_belief__is_one_object_written_only_by_its_transitions() -> None:
    # The belief "this queue may have due jobs" lives in backlog.Backlog alone: no runner field
    # keeps a part of it, and no module but backlog.py writes its state.
    assert not {"_hungry", "_nudges", "_polling", "_looks_begun", "_hand_overs_out", "_owed"} & _runner_state()
    backlog_py = WORKER_DIR / "backlog.py"
    state = set(
        ast.literal_eval(
            next(
                node.value
                for node in ast.walk(_tree(backlog_py))
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets)
            )
        )
    )
    assert {"_hungry", "_generation", "_polling", "_owed", "_claims_out"} <= state
    writes = [
        f"{path.relative_to(PACKAGE_DIR)}:{line} assigns .{attr}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if path != backlog_py and "migrations" not in path.parts
        for line, attr in _assigned_attributes(_tree(path))
        if attr in state
    ]
    assert writes == []


def test_assigned_attributes__sees_plain_augmented_and_nested_writes() -> None:
    # The checker itself: each kind of write outside ``self`` is found, a write on ``self`` is not.
    tree = ast.parse("runner._hungry = False\nr.x._claimed += 1\nself._nudges = 0\na, b.hungry = 1, 2\n")
    assert sorted(attr for _, attr in _assigned_attributes(tree)) == ["_claimed", "_hungry", "hungry"]


def _positional_decoding(tree: ast.AST) -> list[str]:
    """``X(*row)`` calls, and ``row[1]``-style reads of a multi-column row."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(
            isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name) and arg.value.id in ROW_NAMES
            for arg in node.args
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in ROW_NAMES
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)
            and node.slice.value > 0
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_rows__are_decoded_by_name_never_by_position() -> None:
    found = {
        str(path.relative_to(PACKAGE_DIR)): hits
        for path in DECODING_MODULES
        if (hits := _positional_decoding(_tree(path)))
    }
    assert found == {}


def test_positional_decoding__finds_star_calls_and_column_indexes() -> None:
    tree = ast.parse("ClaimedJob(*row)\nx = row[7]\ny = row[0]\nf(a, *ERRORS)\n")
    # row[0] of a one-column result is not a decoding, nor a star of anything but a row
    assert len(_positional_decoding(tree)) == 2


def _state_literals(tree: ast.AST, module: str) -> list[str]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in STATE_NAMES
        and id(node) not in docstrings
        and (module, node.value) not in NOT_STATES
    ]


def test_states__are_named_through_the_states_module_never_as_literals() -> None:
    found = {path.name: hits for path in DECODING_MODULES if (hits := _state_literals(_tree(path), path.name))}
    assert found == {}


def test_state_literals__finds_a_bare_state_name() -> None:
    assert len(_state_literals(ast.parse('if outcome.state == "completed": pass\n'), "x.py")) == 1


def _spawned_tasks() -> set[str]:
    """The task names the worker creates, with an f-string's fields cut off (``awa-runner-``)."""
    names: set[str] = set()
    for path in WORKER_DIR.glob("*.py"):
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            name: ast.expr | None = None
            if called in ("_spawn", "spawn") and node.args:
                name = node.args[0]
            elif called == "create_task":
                name = next((k.value for k in node.keywords if k.arg == "name"), None)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                names.add(name.value)
            elif isinstance(name, ast.JoinedStr) and isinstance(name.values[0], ast.Constant):
                names.add(str(name.values[0].value))
    return names


def test_supervisor_docstring__lists_every_task_the_worker_starts() -> None:
    doc = ast.get_docstring(_tree(WORKER_DIR / "supervisor.py")) or ""
    listed = {re.sub(r"<[a-z]+>$", "", name) for name in re.findall(r"``(awa-[a-z-]+(?:<[a-z]+>)?)``", doc)}
    spawned = _spawned_tasks()
    assert "awa-completer" in spawned and "awa-runner-" in spawned
    assert listed == spawned


@pytest.mark.subprocess
def test_importing_the_models__loads_no_worker_code(tmp_path: Path) -> None:
    # A fresh interpreter with the app installed and nothing else that would import the worker.
    script = textwrap.dedent(
        """
        import sys
        import django
        from django.conf import settings

        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "awa_django"],
            DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}},
            USE_TZ=True,
        )
        django.setup()
        import awa_django.models  # noqa: F401

        loaded = sorted(
            name for name in sys.modules
            if name in ("awa_django.worker", "awa_django.inline") or name.startswith("awa_django.worker.")
        )
        print(",".join(loaded))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_worker__reserves_permits_and_never_makes_one_per_slot() -> None:
    """A dispatcher asks for up to the global maximum before each claim: the worker takes them as
    ``Permits`` (``Allocator.reserve``), a ``Permit`` made per row only. ``try_acquire`` makes one
    per slot granted: with a global maximum of 100,000 that cost 1.3 s per claim."""
    calls = [
        f"{path.name}:{node.lineno}"
        for path in sorted(WORKER_DIR.glob("*.py"))
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Attribute) and node.attr == "try_acquire"
    ]
    assert calls == []
    reserved = [node for node in ast.walk(_tree(RUNNER)) if isinstance(node, ast.Attribute) and node.attr == "reserve"]
    assert len(reserved) == 2  # the runner's own claim and the hand-over's top-up
