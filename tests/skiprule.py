"""A skip for a missing dependency fails the run when AWA_REQUIRE_ALL is set (CI sets it).

A developer's ``python -m pytest`` may lack chromium, or run on a DATABASE_URL server the
restart tests cannot restart: those tests skip, with a reason saying what is missing and how to
get it. CI must run everything, so under ``AWA_REQUIRE_ALL=1`` every skip whose reason starts
with ``missing dependency:`` (use ``missing_dependency()``) is reported as a failure instead,
whether it happens at collection (a module-level skip), in setup (``skipif``) or in the test.
Other skips (not applicable here by design) are left alone. Loaded from tests/conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

MISSING_DEPENDENCY = "missing dependency:"
REQUIRE_ALL = "AWA_REQUIRE_ALL"


def missing_dependency(what: str, fix: str) -> str:
    """The reason of a skip for a missing dependency: ``missing dependency: <what>; <fix>``."""
    return f"{MISSING_DEPENDENCY} {what}; {fix}"


def _required() -> bool:
    return os.environ.get(REQUIRE_ALL, "") not in ("", "0")


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str | None:
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    reason = str(report.longrepr[2])
    return reason.removeprefix("Skipped: ")


def _fail_if_required(report: pytest.CollectReport | pytest.TestReport) -> None:
    reason = _skip_reason(report)
    if reason is None or not reason.startswith(MISSING_DEPENDENCY) or not _required():
        return
    report.outcome = "failed"
    report.longrepr = f"{reason}\n(skips for a missing dependency fail the run when {REQUIRE_ALL} is set, as in CI)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    _fail_if_required(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _fail_if_required(outcome.get_result())
