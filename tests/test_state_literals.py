"""Job states are spelled once, in ``awa_django/states.py``: every other module names them as
``JobState.X``, so a mistyped state is an AttributeError at import, not a filter that matches no
row. Read from the source with ``ast`` (nothing is executed), like tests/import_graph.py.

A string constant equal to a state's name is a state literal unless it is listed in
``NOT_STATES``: a word that happens to be spelled like a state and means something else. SQL files
keep their literals (the partial indexes are declared on them), and so do the migrations (they
are history: the schema as it was written).
"""

from __future__ import annotations

import ast
from pathlib import Path

from awa_django.states import JobState
from tests.import_graph import PACKAGE_DIR

# Reshaped on other branches at the same time; the lead empties this when they merge.
PENDING_ELSEWHERE: tuple[str, ...] = ()

# (file, the definition the constant sits in, value) -> what the word means there.
NOT_STATES = {
    ("awa_django/concurrency/allocator.py", "Allocator.snapshot", "available"): "permits a claim would get now",
    ("awa_django/observability/sink.py", "QUEUE_GAUGES", "available"): "a queue gauge's attribute: free permits",
    ("awa_django/observability/sink.py", "QUEUE_GAUGES", "running"): "a queue gauge's attribute: permits held",
    (
        "awa_django/services/cluster.py",
        "QueueCapacity.from_snapshot",
        "available",
    ): "a capacity snapshot's free permits",
    ("awa_django/snapshot.py", "QueueSnapshot.to_json", "available"): "a queue snapshot's free permits",
    ("awa_django/observability/summary.py", "ALWAYS", "completed"): "an outcome label of the metrics (OUTCOMES)",
    ("awa_django/observability/summary.py", "ALWAYS", "failed"): "an outcome label of the metrics (OUTCOMES)",
    ("awa_django/observability/summary.py", "SOMETIMES", "cancelled"): "an outcome label of the metrics (OUTCOMES)",
    ("awa_django/snapshot.py", "QueueSnapshot.from_json", "available"): "a queue snapshot's free permits",
    ("awa_django/services/stats.py", "throughput", "completed"): "a HistoryMinute column: the minute's completed count",
    ("awa_django/services/stats.py", "throughput", "failed"): "a HistoryMinute column: the minute's failed count",
    (
        "awa_django/services/steps.py",
        "(SLEEPING, WAITING)",
        "waiting",
    ): "how a durable job is parked: in a wait for an event (the admin's filter, the parked-jobs gauge's label)",
}

STATE_NAMES = {state.value for state in JobState}


def _scoped_constants(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """Every string constant with the dotted name of the definition around it (a module-level
    assignment counts as a definition, named by its first target)."""
    found: list[tuple[str, ast.Constant]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            elif not scope and isinstance(child, ast.Assign | ast.AnnAssign):
                target = child.targets[0] if isinstance(child, ast.Assign) else child.target
                inner = ast.unparse(target)
            if isinstance(child, ast.Constant) and isinstance(child.value, str):
                found.append((scope, child))
            visit(child, inner)

    visit(tree, "")
    return found


def state_literals(root: Path = PACKAGE_DIR) -> tuple[list[str], set[tuple[str, str, str]]]:
    """(``file:line: 'value' in scope`` for each state literal, the NOT_STATES entries that were met)."""
    found: list[str] = []
    met: set[tuple[str, str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root.parent).as_posix()
        if "migrations" in path.parts or name == "awa_django/states.py" or name.startswith(PENDING_ELSEWHERE):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for scope, node in _scoped_constants(tree):
            if node.value not in STATE_NAMES:
                continue
            key = (name, scope, node.value)
            if key in NOT_STATES:
                met.add(key)
            else:
                found.append(f"{name}:{node.lineno}: {node.value!r} in {scope or '<module>'}")
    return found, met


def test_state_literals__finds_one_in_a_function(tmp_path: Path) -> None:
    package = tmp_path / "awa_django"
    package.mkdir()
    (package / "probe.py").write_text('def pending(qs):\n    return qs.filter(state="retryable")\n')

    found, _ = state_literals(package)

    assert found == ["awa_django/probe.py:2: 'retryable' in pending"]


def test_awa_django__has_no_state_literal_outside_states() -> None:
    found, _ = state_literals()

    assert found == [], "use JobState.X (awa_django.states) instead of:\n" + "\n".join(found)


def test_not_states__every_entry_is_still_met() -> None:
    _, met = state_literals()

    assert set(NOT_STATES) - met == set(), "remove the NOT_STATES entries no code matches any more"
