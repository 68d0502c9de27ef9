"""The package's import graph, read from the source with ``ast`` (nothing is executed), and the
circles in it: one detector for the package-wide test (tests/test_import_graph.py) and the
worker's (tests/worker/test_import_graph.py).

Every import statement of the package's own modules counts, wherever it sits: at the top of a
module, inside a function (it still runs, later) or under ``if TYPE_CHECKING:`` (it never runs,
but a module that names another in its annotations depends on it all the same, and a circle
closed only there is a circle the layering hides). ``import_sites`` says which kind each one is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


ImportKind = Literal["module", "function", "type_checking"]


@dataclass(frozen=True)
class ImportSite:
    """One import statement of the package's own modules: where it is, what it names, and how it
    runs (at import, inside a function, or never: under ``if TYPE_CHECKING:``)."""

    module: str
    line: int
    imported: frozenset[str]
    kind: ImportKind


def _inside(blocks: list[ast.AST]) -> set[int]:
    """The ids of every node inside these blocks."""
    return {id(node) for block in blocks for node in ast.walk(block)}


def import_sites(root: Path = PACKAGE_DIR) -> Iterator[ImportSite]:
    """Every import statement in ``root``'s modules (migrations left out) that names one of them."""
    paths = {_module_name(path, root): path for path in root.rglob("*.py") if "migrations" not in path.parts}
    known = set(paths)
    for name, path in sorted(paths.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        blocks = list(ast.walk(tree))
        type_checking = _inside([b for b in blocks if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)])
        in_function = _inside([b for b in blocks if isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)])
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            imported = _imported(node, name, is_package, known) - {name}
            if not imported:
                continue
            kind: ImportKind = (
                "type_checking" if id(node) in type_checking else "function" if id(node) in in_function else "module"
            )
            yield ImportSite(name, getattr(node, "lineno", 0), frozenset(imported), kind)


def import_graph(root: Path = PACKAGE_DIR, *, type_checking: bool = True) -> dict[str, set[str]]:
    """{module: the package's modules it imports anywhere in its source} (migrations left out);
    ``type_checking=False`` leaves out the imports under ``if TYPE_CHECKING:``."""
    graph: dict[str, set[str]] = {
        _module_name(path, root): set() for path in root.rglob("*.py") if "migrations" not in path.parts
    }
    for site in import_sites(root):
        if type_checking or site.kind != "type_checking":
            graph[site.module] |= site.imported
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
