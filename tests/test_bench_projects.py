"""The bench's Django project passes awa_django's system checks: the benchmarks start
``manage.py awa_worker`` on it, and a check the package adds (awa.E016 once did) stops every
awa_django row of bench/run.py with an error instead of a figure."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.harness import ROOT

pytestmark = pytest.mark.subprocess


def test_bench_settings__pass_the_system_checks() -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="bench.djproject.settings_awa", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "django", "check", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
