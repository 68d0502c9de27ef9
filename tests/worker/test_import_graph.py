"""The worker's modules import each other in one direction only: no circles, not even through
``if TYPE_CHECKING:`` blocks or imports inside functions (each part the supervisor owns receives
the ``Runtime`` context, never the ``Worker``).

The graph is read from the source with ``ast``, so the test sees every import, whichever branch
or function it sits in, without executing anything.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import cycles, import_graph


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
    # owns receives the Runtime.
    graph = import_graph()
    importers = sorted(name for name, edges in graph.items() if "awa_django.worker.supervisor" in edges)
    assert importers == ["awa_django.worker"]
