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
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from awa_django.observability.endpoints import EndpointServer
from awa_django.observability.sink import QUEUE_GAUGES, WORKER_GAUGES, MetricsSink, WorkerGauges

logger = logging.getLogger(__name__)

# Seconds: from a few milliseconds (a hot queue) to an hour (a long backlog or a slow job).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
BOUNDS = (*(repr(b) for b in BUCKETS), "+Inf")  # the le label values


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


class _Histogram:
    """Bucket counts, sum and count for one label set; updated on the worker's loop only."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.count = 0
        self.total = 0.0


class _JobCollector(Collector):
    """Turns the sink's plain counts into Prometheus families at scrape time."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def collect(self) -> Iterator[Metric]:
        counts = dict(self.sink.counts)  # dict and list copies are atomic under the GIL
        jobs = CounterMetricFamily("awa_jobs", "Job attempts by outcome.", labels=["queue", "kind", "outcome"])
        for labels, value in counts.items():
            jobs.add_metric(list(labels), value)
        yield jobs
        for name, help_text, series in (
            ("awa_job_wait_seconds", "Seconds from a job being due (run_at) to a worker claiming it.", self.sink.waits),
            ("awa_job_run_seconds", "Seconds a finished attempt's handler ran.", self.sink.runs),
        ):
            family = HistogramMetricFamily(name, help_text, labels=["queue", "kind"])
            for pair, histogram in dict(series).items():
                buckets = list(histogram.buckets)
                cumulative: list[tuple[str, float]] = []
                running = 0
                for bound, n in zip(BOUNDS, buckets, strict=True):
                    running += n
                    cumulative.append((bound, running))
                family.add_metric(list(pair), cumulative, histogram.total)
            yield family


class Sink(MetricsSink):
    """Plain counts on the hot path (no locks: the worker's loop is the only writer), turned into
    counters and histograms when scraped; gauges read at scrape time."""

    name = "prometheus"

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.gauges: Callable[[], WorkerGauges] | None = None
        self.counts: dict[tuple[str, str, str], int] = {}
        self.waits: dict[tuple[str, str], _Histogram] = {}
        self.runs: dict[tuple[str, str], _Histogram] = {}
        self.registry.register(_JobCollector(self))
        self.registry.register(_WorkerCollector(self))

    def bind(self, gauges: Callable[[], WorkerGauges]) -> None:
        self.gauges = gauges

    # The two calls below run once per job on the worker's loop: a dict lookup and a few integer
    # additions each (about 1 us together), the histogram update written out rather than called.

    def job_started(self, queue: str, kind: str, waited: float | None) -> None:
        if waited is None:
            return
        histogram = self.waits.get((queue, kind))
        if histogram is None:
            histogram = self.waits[(queue, kind)] = _Histogram()
        if waited < 0.0:  # clocks: run_at written by a client clock ahead of the database's
            waited = 0.0
        histogram.buckets[bisect_left(BUCKETS, waited)] += 1
        histogram.count += 1
        histogram.total += waited

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        key = (queue, kind, outcome)
        try:
            self.counts[key] += 1
        except KeyError:
            self.counts[key] = 1
        if seconds is not None:
            histogram = self.runs.get((queue, kind))
            if histogram is None:
                histogram = self.runs[(queue, kind)] = _Histogram()
            histogram.buckets[bisect_left(BUCKETS, seconds)] += 1
            histogram.count += 1
            histogram.total += seconds

    def page(self, accept: str) -> tuple[bytes, str]:
        """The metrics page in the format ``accept`` asks for (text, or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - an operator's choice
        """Serve ``/metrics`` on ``addr:port`` (``endpoints``: the probes are attached there too)."""
        self.endpoints = EndpointServer(port, addr, metrics=self.page)
        logger.info("serving Prometheus metrics addr=%s port=%s path=/metrics", addr, self.endpoints.port)

    def close(self) -> None:
        endpoints = self.endpoints
        self.endpoints = None
        if endpoints is not None:
            endpoints.close()
