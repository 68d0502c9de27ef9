"""The CI rule of tests/skiprule.py, on a throwaway test suite run in a pytest subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

SUITE = {
    "test_inline.py": """
import pytest

def test_ok():
    pass

def test_missing_tool():
    pytest.skip("missing dependency: the frobnicator; apt-get install frobnicator")

@pytest.mark.skipif(True, reason="missing dependency: a server; start one")
def test_missing_server():
    pass

@pytest.mark.skipif(True, reason="only on Windows")
def test_not_applicable():
    pass
""",
    "test_module_level.py": """
import pytest

pytest.skip("missing dependency: chromium; run .ci/browser-deps", allow_module_level=True)

def test_never_collected():
    pass
""",
}


def run_suite(tmp_path: Path, require_all: str | None) -> subprocess.CompletedProcess[str]:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("AWA_REQUIRE_ALL", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(ROOT)
    if require_all is not None:
        env["AWA_REQUIRE_ALL"] = require_all
    plugins = ["-p", "tests.skiprule", "-p", "no:cacheprovider", "-p", "no:django"]
    isolated = ["-c", os.devnull, "--rootdir", str(tmp_path), "--continue-on-collection-errors"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", *plugins, *isolated, "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("require_all", [None, "0"], ids=["unset", "zero"])
def test_without_require_all__dependency_skips_stay_skips(tmp_path: Path, require_all: str | None) -> None:
    result = run_suite(tmp_path, require_all)

    assert result.returncode == 0, result.stdout
    assert "1 passed, 4 skipped" in result.stdout


@pytest.mark.subprocess
def test_with_require_all__dependency_skips_fail_naming_what_is_missing(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "1")

    assert result.returncode == 1, result.stdout
    summary = [line.split(" - ")[0] for line in result.stdout.splitlines()]
    assert "FAILED test_inline.py::test_missing_tool" in summary
    assert "ERROR test_inline.py::test_missing_server" in summary  # a setup-phase skip: an error
    assert "ERROR test_module_level.py" in summary
    assert "SKIPPED [1] test_inline.py:14: only on Windows" in summary  # not a dependency: still a skip
    assert "missing dependency: the frobnicator; apt-get install frobnicator" in result.stdout
    assert "1 failed, 1 passed, 1 skipped, 2 errors" in result.stdout
