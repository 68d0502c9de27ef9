"""No import cycles inside awa_django: every import statement counts, also one inside a function
(it still runs, later), except those under ``if TYPE_CHECKING:`` (they never run)."""

from __future__ import annotations

from tests.import_graph import cycles, import_graph


def test_cycles__finds_a_cycle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert cycles(graph) == [["a", "b", "c"]]


def test_import_graph__reads_imports_inside_functions() -> None:
    graph = import_graph(type_checking=False)

    assert "awa_django.jobspec" in graph["awa_django.managers"]  # at the top
    assert "awa_django.backends" in graph["awa_django.apps"]  # imported inside AppConfig.ready


def test_awa_django__has_no_import_cycles() -> None:
    graph = import_graph(type_checking=False)
    found = cycles(graph)

    detail = [[f"{a} -> {b}" for a in component for b in sorted(graph[a] & set(component))] for component in found]
    assert found == [], f"import cycles: {detail}"
