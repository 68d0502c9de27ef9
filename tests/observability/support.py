"""A sink that records what the worker reports, for tests (the database and the worker stay real)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from awa_django.observability.sink import MetricsSink, WorkerGauges


class RecordingSink(MetricsSink):
    name = "recording"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished: Counter[tuple[str, str, str]] = Counter()
        self.started: list[tuple[str, str, float | None]] = []
        self.gauges: Callable[[], WorkerGauges] | None = None

    def bind(self, gauges: Callable[[], WorkerGauges]) -> None:
        self.gauges = gauges

    def job_started(self, queue: str, kind: str, waited: float | None) -> None:
        with self.lock:
            self.started.append((queue, kind, waited))

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        with self.lock:
            self.finished[(queue, kind, outcome)] += 1

    def count(self, queue: str, kind: str, outcome: str) -> int:
        with self.lock:
            return self.finished[(queue, kind, outcome)]
