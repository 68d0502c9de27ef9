"""The services and the admin are packages with one subject per module, read from the source with
``ast`` (nothing is executed), like tests/import_graph.py: a module grows past ``MAX_LINES`` only
by taking on a second subject, and an admin is registered by its own module's ``@admin.register``,
loaded by an import in the package's ``__init__``, not by an import at the bottom of a sibling."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import PACKAGE_DIR, import_graph

PACKAGES = ("services", "admin")
MAX_LINES = 400


def _modules(package: str) -> list[Path]:
    return sorted((PACKAGE_DIR / package).glob("*.py"))


def _registers_an_admin(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "admin.register"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for decorator in node.decorator_list
    )


def _late_imports(path: Path) -> list[int]:
    """Lines of module-level imports that come after the module's first other statement."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    seen_other = False
    late: list[int] = []
    for index, node in enumerate(body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if isinstance(node, ast.Import | ast.ImportFrom):
            if seen_other:
                late.append(node.lineno)
        elif not docstring and not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            seen_other = True
    return late


@pytest.mark.parametrize("package", PACKAGES)
def test_package__is_a_package_not_a_module(package: str) -> None:
    assert (PACKAGE_DIR / package / "__init__.py").is_file()
    assert not (PACKAGE_DIR / f"{package}.py").exists()
    assert sorted(path.name for path in PACKAGE_DIR.glob(f"{package}_*.py")) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_package__no_module_exceeds_the_line_budget(package: str) -> None:
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in _modules(package)}

    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_admin__every_module_that_registers_an_admin_is_imported_by_the_package() -> None:
    registering = {f"awa_django.admin.{path.stem}" for path in _modules("admin") if _registers_an_admin(path)}
    imported = import_graph(type_checking=False)["awa_django.admin"]

    assert {"awa_django.admin.jobs", "awa_django.admin.queues"} <= registering
    assert registering - imported == set()


@pytest.mark.parametrize("package", PACKAGES)
def test_package__no_module_imports_at_its_bottom(package: str) -> None:
    late = {path.name: lines for path in _modules(package) if (lines := _late_imports(path))}

    assert late == {}


def test_late_imports__finds_an_import_after_code(tmp_path: Path) -> None:
    path = tmp_path / "late.py"
    path.write_text('"""doc"""\nimport json\n\nX = 1\nfrom os import path  # noqa: E402\n')

    assert _late_imports(path) == [5]
