"""``manage.py demo`` as a new user runs it: the fail job's retries and final failure are in its
output, and a summary is printed once the demo's jobs are done."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from tests.harness import ROOT, wait_until, worker_env
from tests.worker.support import SpawnedWorker, Spawner


@pytest.mark.slow
def test_demo__prints_retries_failure_and_a_summary(spawn: Spawner) -> None:
    log = spawn.tmp_path / "demo.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "demo", "--jobs", "20"],
            cwd=ROOT,
            env=worker_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    demo = SpawnedWorker(process, log)
    spawn.started.append(demo)
    wait_until(lambda: "demo queue empty" in demo.log, timeout=120, interval=0.2, what=f"the summary in {log}")
    text = demo.log
    found = re.search(r"fail #(\d+) \(3 attempts\)", text)
    assert found, text[-3000:]
    fail_id = found.group(1)
    assert f"job retried job_id={fail_id} kind=fail queue=default attempt=1" in text
    assert f"job retried job_id={fail_id} kind=fail queue=default attempt=2" in text
    assert f"job failed job_id={fail_id} kind=fail queue=default attempt=3" in text
    assert "DemoFailureError" in text
    # 20 noop + 10 sleep + 1 scheduled noop completed; the fail job failed after 2 retries.
    assert "demo queue empty: 31 completed, 1 failed, 0 cancelled, 2 retries" in text, text[-3000:]
    demo.signal(signal.SIGINT)
    assert demo.wait_exit(60) == 0, demo.log[-3000:]
