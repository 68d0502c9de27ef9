"""The worker's metrics door: a ``MetricsSink`` with a no-op default.

The worker calls ``job_started`` when it dispatches a claimed attempt and ``job_finished`` when
the attempt's outcome is known (the completer and the maintenance leader report the outcomes only
they know: ``lost`` and ``rescued``). Those calls are the whole per-job cost: a few counter and
histogram updates, labelled by queue, kind and outcome only, all bounded (kinds come from the
registry: a job whose kind has no handler is counted under ``UNREGISTERED_KIND``). Everything
else (capacity, permits, leadership) is read from a ``WorkerGauges`` snapshot when a scrape or an
export asks for it, never on the hot path.

The runtime imports only this module; the Prometheus and OpenTelemetry implementations are
imported by ``load_sink`` when asked for by name, so neither extra is needed otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django.utils.module_loading import import_string

from awa_django.exceptions import ConfigurationError
from awa_django.states import JobState

if TYPE_CHECKING:
    from awa_django.concurrency import Allocator
    from awa_django.observability.endpoints import EndpointServer

# The state an attempt's outcome writes, as the outcome label names it (a terminal state is its
# own label).
STATE_OUTCOMES: dict[str, str] = {
    JobState.COMPLETED: JobState.COMPLETED.value,
    JobState.RETRYABLE: "retried",
    JobState.SCHEDULED: "snoozed",
    JobState.FAILED: JobState.FAILED.value,
    JobState.CANCELLED: JobState.CANCELLED.value,
}
# Why an attempt's outcome was not written (the (id, running, run_lease) guard refused it), as the
# outcome label names it: an operator cancelled or deleted the running job, so the outcome is
# discarded; this worker handed the job back at shutdown; or, and only then is anything lost, the
# row was rescued under a newer lease while the attempt still ran. (The label "discarded" stays
# for the metric's sake; the log line says "cancelled while running", see joblog.WORDS.)
REFUSALS: dict[str, str] = {
    "discarded": "an operator cancelled (or deleted) the job while it ran, and the cancel stands",
    "handed_back": "handed back at shutdown; it runs again",
    "lost": "lost: the attempt was rescued meanwhile, and the newer state stands",
}
# A durable job's sleep or wait ended the attempt (``Outcome.parked``): scheduled or waiting again.
PARKED = "parked"
# The outcome label of ``awa_jobs_total``: each attempt ends in exactly one.
OUTCOMES = (*STATE_OUTCOMES.values(), PARKED, *REFUSALS, "rescued")
# The kind label of a job whose kind has no registered handler (mistyped kinds stay one series).
UNREGISTERED_KIND = "<unregistered>"

SINKS = {"none": "", "prometheus": "awa_django.observability.prometheus", "otel": "awa_django.observability.otel"}
EXTRAS = {"prometheus": ("prometheus_client", "awa-django[metrics]"), "otel": ("opentelemetry", "awa-django[otel]")}

# The gauges read from a WorkerGauges at scrape/export time: (Prometheus name, help, attribute).
QUEUE_GAUGES = (
    ("awa_queue_running", "Jobs this worker is running (or writing) for the queue: permits held.", "running"),
    ("awa_queue_floor", "Guaranteed slots: min_workers (weighted) or max_workers/cluster cap.", "floor"),
    ("awa_queue_weight", "The queue's weight in the overflow pool (0 in hard-reserved mode).", "weight"),
    ("awa_queue_fair_share", "The queue's fractional share of the overflow pool now (weighted).", "fair_share"),
    ("awa_queue_overflow_held", "Overflow-pool permits the queue holds now (weighted mode).", "overflow_held"),
    ("awa_queue_available_permits", "Permits a claim for the queue would get now.", "available"),
    ("awa_queue_demand", "Permits the queue asked for and was not granted at its last claim.", "demand"),
)

WORKER_GAUGES = (
    ("awa_worker_up", "1 while the worker runs, 0 once it is stopping.", "up"),
    ("awa_worker_leader", "1 if this worker is the maintenance leader.", "leader"),
    ("awa_worker_listening", "1 while the LISTEN connection is healthy.", "listening"),
    ("awa_worker_permits_in_use", "Permits held over every queue (jobs running or being written).", "permits_in_use"),
    ("awa_worker_permits_max", "The global maximum of jobs at once (weighted mode only).", "permits_total"),
)


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """One queue's capacity in this worker, as the allocator sees it now."""

    queue: str
    running: int  # permits held: jobs running or being written
    floor: int  # guaranteed slots: min_workers (weighted) or max_workers (hard-reserved, or the cluster cap)
    weight: int  # 0 in hard-reserved mode
    fair_share: float  # fractional share of the overflow pool now (weighted), else the floor
    overflow_held: int  # overflow permits held (weighted), else 0
    available: int  # permits a claim would get now
    demand: int  # permits asked for and not granted at the last claim


@dataclass(frozen=True, slots=True)
class WorkerGauges:
    """This worker's health: read at scrape or export time."""

    up: bool
    leader: bool
    listening: bool
    permits_in_use: int
    permits_total: int | None  # the global maximum in weighted mode, else None
    queues: tuple[QueueGauges, ...]


class GaugeSource(Protocol):
    """What the gauges are read from: the worker, seen through this narrow door."""

    @property
    def allocator(self) -> Allocator: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def listening(self) -> bool: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The worker's event loop while it runs (the allocator is read there)."""
        ...


def worker_gauges(worker: GaugeSource) -> WorkerGauges:
    """Read a worker's gauges from its allocator (pure reads, no I/O; call on the worker's loop
    or accept a slightly torn view from another thread: every value is one int or float)."""
    allocator = worker.allocator
    queues = []
    for name in allocator.queues:
        capacity = allocator.capacity(name)
        weighted = allocator.mode == "weighted"
        floor = getattr(capacity, "min_workers", None) if weighted else getattr(capacity, "max_workers", 0)
        queues.append(
            QueueGauges(
                queue=name,
                running=allocator.in_flight(name),
                floor=int(floor or 0),
                weight=int(getattr(capacity, "weight", 0)),
                fair_share=float(allocator.share(name)),
                overflow_held=int(getattr(capacity, "overflow_held", 0)),
                available=allocator.available(name),
                demand=allocator.demand(name),
            )
        )
    return WorkerGauges(
        up=not worker.stopping,
        leader=worker.is_leader,
        listening=worker.listening,
        permits_in_use=allocator.total_in_flight,
        permits_total=allocator.global_max_workers,
        queues=tuple(queues),
    )


def gauge_reader(worker: GaugeSource, timeout: float = 5.0) -> Callable[[], WorkerGauges]:
    """A reader of the worker's gauges callable from any thread (a scrape runs in the HTTP
    server's thread): the allocator is read on the worker's loop, where it changes."""

    def read() -> WorkerGauges:
        loop = worker.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return worker_gauges(worker)
        try:
            if asyncio.get_running_loop() is loop:
                return worker_gauges(worker)
        except RuntimeError:
            pass  # not on any loop: ask the worker's
        answer: concurrent.futures.Future[WorkerGauges] = concurrent.futures.Future()

        def on_loop() -> None:
            try:
                answer.set_result(worker_gauges(worker))
            except Exception as exc:
                answer.set_exception(exc)

        loop.call_soon_threadsafe(on_loop)
        return answer.result(timeout)

    return read


class MetricsSink:
    """Where the worker reports what happens; every method is a no-op here.

    Implementations override what they record. ``job_started`` and ``job_finished`` run once per
    attempt on the worker's event loop: keep them to a few counter updates.
    """

    name = "none"
    endpoints: EndpointServer | None = None
    """The HTTP server ``serve`` started (``/metrics``; the command attaches the probes to it)."""

    def bind(self, gauges: Callable[[], WorkerGauges]) -> None:
        """The worker gives its gauge reader once it exists (read it at scrape/export time)."""

    def job_started(self, queue: str, kind: str, waited: float | None) -> None:
        """An attempt was dispatched; ``waited`` is seconds from due (run_at) to claimed."""

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        """An attempt ended with ``outcome`` (one of OUTCOMES) after ``seconds`` of running."""

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - an operator's choice
        """Expose the metrics on ``port`` (only sinks that can be scraped implement this)."""
        raise ConfigurationError(
            f"--metrics-port {port} needs metrics to expose: pass --metrics prometheus (or set "
            "AWA['METRICS'] = 'prometheus') with awa-django[metrics] installed"
        )

    def close(self) -> None:
        """The worker stopped: stop serving, flush exports."""


class NoopSink(MetricsSink):
    """The default: metrics off, nothing recorded, nothing imported."""


def load_sink(name: str | MetricsSink | None) -> MetricsSink:
    """The sink named ``name``: "none", "prometheus", "otel", or a dotted path to a MetricsSink
    subclass; raises ConfigurationError naming the value and the fix."""
    if isinstance(name, MetricsSink):
        return name
    if name is None or name == "none" or name == "":
        return NoopSink()
    if not isinstance(name, str):
        raise ConfigurationError(
            f"AWA['METRICS'] is {name!r}; use one of {', '.join(SINKS)} or a dotted path to a MetricsSink subclass"
        )
    if name in EXTRAS:
        package, extra = EXTRAS[name]
        try:
            module = __import__(SINKS[name], fromlist=["Sink"])
        except ImportError as exc:
            raise ConfigurationError(
                f"metrics {name!r} needs the {package} package ({exc}): pip install '{extra}', "
                "or turn metrics off (AWA['METRICS'] = 'none', or leave out --metrics)"
            ) from exc
        sink: MetricsSink = module.Sink()
        return sink
    if "." not in name:
        raise ConfigurationError(
            f"unknown metrics sink {name!r}; use one of {', '.join(SINKS)} or a dotted path to a MetricsSink subclass"
        )
    try:
        cls = import_string(name)
    except ImportError as exc:
        raise ConfigurationError(f"metrics sink {name!r} cannot be imported: {exc}; fix the dotted path") from exc
    if not (isinstance(cls, type) and issubclass(cls, MetricsSink)):
        raise ConfigurationError(f"metrics sink {name!r} is {cls!r}, not a MetricsSink subclass; point at one")
    instance: MetricsSink = cls()
    return instance
