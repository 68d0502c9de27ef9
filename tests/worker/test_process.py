"""The awa_worker process's own set-up: the garbage collector tuned, or left alone when told."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness import ROOT, worker_env

SCRIPT = """
import gc, sys
from awa_django.worker.process import GEN0_THRESHOLD, tune_gc
before = gc.get_threshold()
frozen_before = gc.get_freeze_count()  # the interpreter may have frozen objects of its own
enabled = sys.argv[1] == "on"
assert tune_gc(enabled) is enabled
if enabled:
    assert gc.get_freeze_count() > frozen_before + 1000, gc.get_freeze_count()  # the start-up's objects
    assert gc.get_threshold() == (GEN0_THRESHOLD, *before[1:]), gc.get_threshold()
else:
    assert gc.get_freeze_count() == frozen_before, (gc.get_freeze_count(), frozen_before)
    assert gc.get_threshold() == before, (gc.get_threshold(), before)
gc.disable()
assert tune_gc(True) is False  # a process that turned the collector off keeps it off
print("OK")
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["on", "off"])
def test_tune_gc__freezes_start_up_and_raises_gen0_only_when_enabled(mode: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr
