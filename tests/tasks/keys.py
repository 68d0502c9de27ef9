"""Fairness key functions for the backend's OPTIONS["FAIR_KEY"] in the tests (imported by dotted path)."""

from __future__ import annotations

from typing import Any


def tenant_key(task: Any, args: list[Any], kwargs: dict[str, Any]) -> str:
    """``tenant:<tenant>`` from the task's ``tenant`` kwarg, else the default key."""
    tenant = kwargs.get("tenant")
    return "" if tenant is None else f"tenant:{tenant}"


def raising_key(task: Any, args: list[Any], kwargs: dict[str, Any]) -> str:
    raise LookupError(f"no tenant for {task.name}")


def bad_key(task: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return 42


NOT_CALLABLE = "tenant"
