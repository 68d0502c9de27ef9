"""tests/slow.txt names tests that exist: a renamed or removed test left there would silently fall
back into the fast loop's time (or out of nothing), so each listed node id must name a file and a
test function (or a hypothesis state machine's class) defined in it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import slow_list

ROOT = Path(__file__).resolve().parent.parent


def test_slow_list__every_entry_names_a_test_that_exists() -> None:
    listed = slow_list()
    assert listed
    missing = []
    for nodeid in sorted(listed):
        path, *names = nodeid.split("::")
        source = ROOT / path
        name = names[0].split("[", 1)[0]  # a parametrized test's function, or a class
        defined = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*=", re.M)
        if not source.is_file() or not defined.search(source.read_text(encoding="utf-8")):
            missing.append(nodeid)
    assert not missing, f"tests/slow.txt names tests that do not exist: {missing}"
