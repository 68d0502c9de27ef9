"""The docs hook module (``docs/_hooks/reference.py``), loaded by path as MkDocs loads it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.harness import ROOT

DOCS = ROOT / "docs"
HOOK = DOCS / "_hooks" / "reference.py"


def load_hook() -> ModuleType:
    name = "awa_docs_reference_hook"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def page(path: str) -> str:
    return (DOCS / path).read_text(encoding="utf-8")
