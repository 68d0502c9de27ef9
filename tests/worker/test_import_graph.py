"""The worker's modules import each other in one direction only: no circles, not even through
``if TYPE_CHECKING:`` blocks or imports inside functions (each part that needs the supervisor
meets it through a Protocol defined where it is needed, not by importing ``Worker``).

The graph is read from the source with ``ast``, so the test sees every import, whichever branch
or function it sits in, without executing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import awa_django

PACKAGE_DIR = Path(awa_django.__file__).resolve().parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.AST, importer: str, is_package: bool, known: set[str]) -> set[str]:
    """The package's own modules an import statement names (``from a import b`` names ``a.b``
    when ``b`` is a module, else ``a``)."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against the importer's package
            base = importer.split(".") if is_package else importer.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        for alias in node.names:
            child = f"{module}.{alias.name}"
            found.add(child if child in known else module)
    return {name for name in found if name in known}


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """{module: the package's modules it imports anywhere in its source}."""
    paths = {_module_name(path, root): path for path in root.rglob("*.py")}
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(tree):
            edges |= _imported(node, name, is_package, known)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]], within: str) -> list[list[str]]:
    """Every strongly connected group of more than one module under ``within`` (Tarjan), each
    sorted; edges to modules outside ``within`` are ignored."""
    nodes = sorted(n for n in graph if n.startswith(within + "."))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if not nxt.startswith(within + "."):
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in nodes:
        if node not in index:
            visit(node)
    return found


def test_cycles__finds_a_circle_through_a_type_checking_import(tmp_path: Path) -> None:
    # The detector itself: a circle hidden behind TYPE_CHECKING and one inside a function count.
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from pkg.sub.b import B\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.a import A\n"
    )
    (pkg / "sub" / "c.py").write_text("def f():\n    from . import d\n")
    (pkg / "sub" / "d.py").write_text("from pkg.sub import c\n")
    (pkg / "sub" / "e.py").write_text("from pkg.sub import a\n")
    graph = import_graph(pkg)
    assert cycles(graph, "pkg.sub") == [["pkg.sub.a", "pkg.sub.b"], ["pkg.sub.c", "pkg.sub.d"]]


def test_worker_modules__import_each_other_without_circles() -> None:
    graph = import_graph()
    assert "awa_django.worker.supervisor" in graph  # the walk found the package
    assert cycles(graph, "awa_django.worker") == []


def test_worker_modules__no_part_imports_the_supervisor() -> None:
    # Only the package's lazy door (awa_django.worker.Worker) names the supervisor; every part it
    # owns meets it through a Protocol.
    graph = import_graph()
    importers = sorted(name for name, edges in graph.items() if "awa_django.worker.supervisor" in edges)
    assert importers == ["awa_django.worker"]
