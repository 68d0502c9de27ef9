"""The marks tests/conftest.py sets at collection: pure, db, subprocess, each from what a test uses."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _marks(request: pytest.FixtureRequest) -> set[str]:
    return {name for name in ("pure", "db", "subprocess") if request.node.get_closest_marker(name) is not None}


def test_marks__a_test_without_database_or_process_is_pure(request: pytest.FixtureRequest) -> None:
    assert _marks(request) == {"pure"}


@pytest.mark.django_db
def test_marks__a_django_db_mark_is_db(request: pytest.FixtureRequest) -> None:
    assert _marks(request) == {"db"}


def test_marks__a_fixture_that_needs_the_database_is_db(
    request: pytest.FixtureRequest, other_connection: object
) -> None:
    assert _marks(request) == {"db"}


@pytest.mark.subprocess
def test_marks__a_subprocess_mark_is_kept_and_not_pure(request: pytest.FixtureRequest) -> None:
    assert _marks(request) == {"subprocess"}
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0


def test_marks__a_pure_test_that_starts_a_process_fails_naming_the_fix() -> None:
    with pytest.raises(AssertionError, match=r"is marked pure but starts a process .*mark it @pytest.mark.subprocess"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
