"""Prometheus metrics for a worker process (extra ``awa-django[metrics]``: prometheus-client).

Each sink has its own ``CollectorRegistry`` (never the global one), so several workers in one
process (tests, an embedding application) cannot collide, and ``--metrics-port`` serves exactly
this worker's metrics. Several worker processes on one host each take their own port. The queue
depth gauges come from the database and so are not here: they are served once for the whole
cluster by ``awa_django.observability.views.metrics`` (one query per scrape, not one per worker).

Names (documented in the README's Observability section):

- ``awa_jobs_total{queue,kind,outcome}``: attempts by outcome (see ``sink.OUTCOMES``).
- ``awa_job_wait_seconds{queue,kind}``: histogram, from due (run_at) to claimed.
- ``awa_job_run_seconds{queue,kind}``: histogram, handler run time of finished attempts.
- ``awa_queue_running``, ``awa_queue_floor``, ``awa_queue_weight``, ``awa_queue_fair_share``,
  ``awa_queue_overflow_held``, ``awa_queue_available_permits``, ``awa_queue_demand`` ``{queue}``:
  this worker's capacity per queue (read at scrape time).
- ``awa_worker_up``, ``awa_worker_leader``, ``awa_worker_listening``, ``awa_worker_permits_in_use``,
  ``awa_worker_permits_max``: this worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from awa_django.exceptions import ConfigurationError
from awa_django.observability.sink import QUEUE_GAUGES, WORKER_GAUGES, MetricsSink, WorkerGauges

logger = logging.getLogger(__name__)

# Seconds: from a few milliseconds (a hot queue) to an hour (a long backlog or a slow job).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class _WorkerCollector(Collector):
    """Reads the worker's gauges at scrape time (nothing is kept up to date in between)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reader = self.sink.gauges
        if reader is None:
            return
        try:
            gauges = reader()
        except Exception as exc:  # a scrape must not take the worker down; say why it is empty
            logger.warning("metrics scrape could not read the worker's gauges error=%r", exc)
            return
        yield from worker_families(gauges)


def worker_families(gauges: WorkerGauges) -> Iterator[GaugeMetricFamily]:
    for name, help_text, attr in QUEUE_GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=["queue"])
        for queue in gauges.queues:
            family.add_metric([queue.queue], float(getattr(queue, attr)))
        yield family
    for name, help_text, attr in WORKER_GAUGES:
        value = getattr(gauges, attr)
        if value is not None:
            yield GaugeMetricFamily(name, help_text, value=float(value))


class Sink(MetricsSink):
    """Counters and histograms on the hot path; gauges read at scrape time."""

    name = "prometheus"

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.gauges: Callable[[], WorkerGauges] | None = None
        self.jobs = Counter(
            "awa_jobs", "Job attempts by outcome.", ["queue", "kind", "outcome"], registry=self.registry
        )
        self.wait = Histogram(
            "awa_job_wait_seconds",
            "Seconds from a job being due (run_at) to a worker claiming it.",
            ["queue", "kind"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.run = Histogram(
            "awa_job_run_seconds",
            "Seconds a finished attempt's handler ran.",
            ["queue", "kind"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_WorkerCollector(self))
        # Children by labels: a dict lookup per job instead of prometheus-client's labels() call.
        self._counted: dict[tuple[str, str, str], Any] = {}
        self._waited: dict[tuple[str, str], Any] = {}
        self._ran: dict[tuple[str, str], Any] = {}
        self._server: Any = None

    def bind(self, gauges: Callable[[], WorkerGauges]) -> None:
        self.gauges = gauges

    def job_started(self, queue: str, kind: str, waited: float | None) -> None:
        if waited is None:
            return
        key = (queue, kind)
        child = self._waited.get(key)
        if child is None:
            child = self._waited[key] = self.wait.labels(queue, kind)
        child.observe(max(waited, 0.0))

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        key = (queue, kind, outcome)
        counter = self._counted.get(key)
        if counter is None:
            counter = self._counted[key] = self.jobs.labels(queue, kind, outcome)
        counter.inc()
        if seconds is not None:
            ran = self._ran.get(key[:2])
            if ran is None:
                ran = self._ran[key[:2]] = self.run.labels(queue, kind)
            ran.observe(seconds)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - an operator's choice
        try:
            self._server = start_http_server(port, addr, registry=self.registry)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {addr}:{port}: {exc}; pick a free port with --metrics-port "
                "(each worker process on a host needs its own)"
            ) from exc
        logger.info("serving Prometheus metrics addr=%s port=%s path=/metrics", addr, port)

    def close(self) -> None:
        server = self._server
        self._server = None
        if isinstance(server, tuple):  # prometheus-client >= 0.20 returns (server, thread)
            server[0].shutdown()
            server[0].server_close()
