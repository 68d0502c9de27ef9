"""The worker's summary line: what it counts (pure), and on a real worker at ``-v 1`` it appears
while jobs run and not while the worker idles."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import pytest

from awa_django.models import Job, WorkerInstance
from awa_django.observability.sink import MetricsSink
from awa_django.observability.summary import SummarySink, Window, median
from tests.harness import wait_until
from tests.worker.support import Spawner, wait_for_row

SUMMARY = re.compile(r"last \d+\.\ds: queue=summary completed=(\d+) retried=(\d+) failed=(\d+) wait_p50_ms=\S+")


class Recording(MetricsSink):
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        self.calls.append((queue, kind, outcome))


def test_window__counts_per_queue_and_the_wait_median() -> None:
    window = Window()
    for queue, waited, outcome in [("a", 0.010, "completed"), ("a", 0.030, "retried"), ("b", None, "failed")]:
        window.started(queue, waited)
        window.finished(queue, outcome)
    window.finished("a", "rescued")

    text, figures = window.line(10.0)

    assert text == (
        "last 10.0s: queue=a completed=1 retried=1 failed=0 rescued=1 wait_p50_ms=20.0; "
        "queue=b completed=0 retried=0 failed=1 wait_p50_ms=-"
    )
    assert figures["a"]["wait_p50_ms"] == 20.0 and figures["b"]["failed"] == 1
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([]) is None


def test_summary_sink__passes_calls_on_and_without_a_loop_closes_the_window_past_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awa_django.worker.summary")
    now = [100.0]
    inner = Recording()
    sink = SummarySink(inner, interval=10.0, clock=lambda: now[0])
    sink.job_finished("q", "k", "completed", 0.1)
    now[0] = 105.0
    sink.job_finished("q", "k", "completed", 0.1)
    assert not caplog.records  # the window is still open
    now[0] = 111.0
    sink.job_finished("q", "k", "failed", 0.1)

    assert [r.getMessage() for r in caplog.records] == [
        "last 11.0s: queue=q completed=2 retried=0 failed=1 wait_p50_ms=-"
    ]
    assert len(inner.calls) == 3
    sink.close()
    assert len(caplog.records) == 1  # nothing ended since: close adds no line


@pytest.mark.slow
def test_worker_at_v1__summary_line_while_jobs_run__none_while_idle(spawn: Spawner) -> None:
    worker = spawn("-q", "summary", "-v", "1", "--summary-interval", "0.3", "--heartbeat-interval", "0.25")

    def snapshot_after(seconds: float, since: object) -> object:
        """Wait for the worker's snapshot row to be written ``seconds`` after ``since`` (its own clock)."""

        def check() -> object:
            row = WorkerInstance.objects.order_by("-last_seen_at").first()
            if row is None or (since is not None and row.last_seen_at < since + timedelta(seconds=seconds)):  # type: ignore[operator]
                return None
            return row.last_seen_at

        return wait_until(check, timeout=60, what=f"a worker snapshot {seconds}s later")

    started = snapshot_after(0, None)
    snapshot_after(1.0, started)  # idle for more than three summary intervals
    assert not SUMMARY.search(worker.log), worker.log[-2000:]

    jobs = [Job.objects.enqueue("noop", queue="summary") for _ in range(5)]
    for job in jobs:
        wait_for_row(job.pk, state="completed", timeout=60)
    lines = wait_until(
        lambda: (found := SUMMARY.findall(worker.log)) and sum(int(c) for c, _, _ in found) == 5 and found,
        timeout=60,
        what="summary lines counting the 5 completed jobs",
    )
    assert all(retried == failed == "0" for _, retried, failed in lines)
    done = snapshot_after(0, None)
    snapshot_after(1.0, done)  # idle again, for more than three intervals
    assert len(SUMMARY.findall(worker.log)) == len(lines), worker.log[-2000:]
    assert "job completed" not in worker.log  # per-job lines are for -v 2
    worker.assert_alive()
