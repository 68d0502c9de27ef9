"""The ``awa`` fixture comes from the ``pytest11`` entry point: a project's tests use it with
nothing in their conftest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from awa_django.testing import pytest_plugin
from tests.harness import ROOT

USER_TEST = textwrap.dedent(
    """
    from awa_django.models import Job

    def test_users_view(awa):
        job = Job.objects.enqueue("send_welcome", {"user_id": 0}, queue="emails")
        awa.assert_enqueued("send_welcome", args={"user_id": 0}, count=1)
        report = awa.run_jobs(raise_on_failure=False)
        assert [(run.job_id, run.state) for run in report] == [(job.pk, "retryable")]  # no such user
        assert "DoesNotExist" in report[0].error["error"]
        awa.assert_enqueued("send_welcome")  # retryable: still waiting
    """
)


def test_entry_point__registers_the_plugin_module():
    [entry] = [e for e in entry_points(group="pytest11") if e.value == "awa_django.testing.pytest_plugin"]
    assert entry.load() is pytest_plugin


def test_awa_fixture__has_the_helpers(awa):
    from awa_django import testing

    assert awa.run_jobs is testing.run_jobs
    assert awa.assert_enqueued is testing.assert_enqueued
    assert awa.assert_not_enqueued is testing.assert_not_enqueued
    assert awa.enqueued_jobs is testing.enqueued_jobs
    assert len(awa.run_jobs()) == 0  # and may use the database without a mark


@pytest.mark.subprocess
@pytest.mark.slow
def test_awa_fixture__works_in_a_project_without_a_conftest(tmp_path: Path):
    (tmp_path / "test_user.py").write_text(USER_TEST)
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWA_TEST_DB="test_awa_plugin", DJANGO_SETTINGS_MODULE="")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ds=testproject.settings", "test_user.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert not (tmp_path / "conftest.py").exists()
