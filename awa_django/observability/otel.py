"""OpenTelemetry metrics for a worker (extra ``awa-django[otel]``: opentelemetry-api, and an SDK
with an exporter configured by the application).

The same instruments as the Prometheus sink, through the OTel API (a Prometheus exporter turns
``awa.jobs`` into ``awa_jobs_total``, ``awa.job.wait`` with unit ``s`` into
``awa_job_wait_seconds``, and so on): a counter of attempts by queue/kind/outcome, histograms of
wait and run time, and observable gauges per queue and per worker read at collection time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from awa_django.observability.sink import QUEUE_GAUGES, WORKER_GAUGES, MetricsSink, WorkerGauges

logger = logging.getLogger(__name__)


class Sink(MetricsSink):
    name = "otel"

    def __init__(self, meter_provider: Any = None) -> None:
        meter = metrics.get_meter("awa_django", meter_provider=meter_provider)
        self.gauges: Callable[[], WorkerGauges] | None = None
        self.jobs = meter.create_counter("awa.jobs", unit="{job}", description="Job attempts by outcome.")
        self.wait = meter.create_histogram(
            "awa.job.wait", unit="s", description="Seconds from a job being due (run_at) to a worker claiming it."
        )
        self.run = meter.create_histogram("awa.job.run", unit="s", description="Seconds a finished attempt ran.")
        for name, description, attr in QUEUE_GAUGES:
            meter.create_observable_gauge(
                name.replace("awa_queue_", "awa.queue."),
                callbacks=[self._queue_callback(attr)],
                description=description,
            )
        for name, description, attr in WORKER_GAUGES:
            meter.create_observable_gauge(
                name.replace("awa_worker_", "awa.worker."),
                callbacks=[self._worker_callback(attr)],
                description=description,
            )
        self._attributes: dict[tuple[str, ...], dict[str, str]] = {}

    def bind(self, gauges: Callable[[], WorkerGauges]) -> None:
        self.gauges = gauges

    def _read(self) -> WorkerGauges | None:
        if self.gauges is None:
            return None
        try:
            return self.gauges()
        except Exception as exc:  # an export must not take the worker down
            logger.warning("metrics export could not read the worker's gauges error=%r", exc)
            return None

    def _queue_callback(self, attr: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            gauges = self._read()
            if gauges is None:
                return []
            return [Observation(float(getattr(q, attr)), {"queue": q.queue}) for q in gauges.queues]

        return observe

    def _worker_callback(self, attr: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            gauges = self._read()
            value = None if gauges is None else getattr(gauges, attr)
            return [] if value is None else [Observation(float(value))]

        return observe

    def _attrs(self, *values: str) -> dict[str, str]:
        found = self._attributes.get(values)
        if found is None:
            found = self._attributes[values] = dict(zip(("queue", "kind", "outcome"), values, strict=False))
        return found

    def job_started(self, queue: str, kind: str, waited: float | None) -> None:
        if waited is not None:
            self.wait.record(max(waited, 0.0), self._attrs(queue, kind))

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        self.jobs.add(1, self._attrs(queue, kind, outcome))
        if seconds is not None:
            self.run.record(seconds, self._attrs(queue, kind))
