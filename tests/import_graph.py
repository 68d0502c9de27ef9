"""The package's import graph, read from the source with ``ast`` (nothing is executed), and the
circles in it: one detector for the package-wide test (tests/test_import_graph.py) and the
worker's stricter one (tests/worker/test_import_graph.py).

Every import statement counts, also one inside a function (it still runs, later); one under
``if TYPE_CHECKING:`` counts only when asked (``type_checking=True``): it never runs, but the
worker's parts must not even name the supervisor there.
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


def import_graph(root: Path = PACKAGE_DIR, *, type_checking: bool = True) -> dict[str, set[str]]:
    """{module: the package's modules it imports anywhere in its source} (migrations left out);
    ``type_checking=False`` leaves out the imports under ``if TYPE_CHECKING:``."""
    paths = {_module_name(path, root): path for path in root.rglob("*.py") if "migrations" not in path.parts}
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skipped = (
            set()
            if type_checking
            else {
                id(node)
                for block in ast.walk(tree)
                if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                for node in ast.walk(block)
            }
        )
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(tree):
            if id(node) not in skipped:
                edges |= _imported(node, name, is_package, known)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]], within: str | None = None) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted; with
    ``within``, only the modules under that package, and edges leaving it are ignored."""

    def inside(name: str) -> bool:
        return within is None or name.startswith(within + ".")

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
            if not inside(nxt):
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

    for node in sorted(n for n in graph if inside(n)):
        if node not in index:
            visit(node)
    return found
