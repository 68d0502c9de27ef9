"""OpenTelemetry: trace context from enqueue to the attempt's span (in-memory exporter), and the
metrics through the OTel API (in-memory reader). Needs the otel extra (opentelemetry-sdk)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import wait_for_row

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awa_django.observability.otel import Sink

QUEUE = "traced"
_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def tracer() -> trace.Tracer:
    """The process's tracer provider (OpenTelemetry allows setting it once), spans kept in memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    return trace.get_tracer("tests")


@pytest.fixture
def exporter(tracer: trace.Tracer) -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _registry() -> Registry:
    async def work() -> None:
        return None

    async def broken() -> None:
        raise RuntimeError("broken on purpose")

    registry = Registry()
    registry.register(JobHandler("work", work, queue=QUEUE))
    registry.register(JobHandler("broken", broken, queue=QUEUE))
    return registry


def _run_span(exporter: InMemorySpanExporter, job_id: int) -> Any:
    def find() -> Any:
        for span in exporter.get_finished_spans():
            if (span.attributes or {}).get("messaging.message.id") == str(job_id):
                return span
        return None

    return wait_until(find, timeout=20, what=f"the run span of job {job_id}")


@pytest.mark.django_db(transaction=True)
def test_trace__enqueue_in_a_span__the_run_span_shares_its_trace(
    tracer: trace.Tracer, exporter: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request") as request:
        job = Job.objects.enqueue("work", queue=QUEUE, metadata={"source": "signup"})
        many = Job.objects.enqueue_many([{"kind": "work", "queue": QUEUE}, {"kind": "broken", "queue": QUEUE}])
    assert many == 2
    context = request.get_span_context()
    stored = Job.objects.get(pk=job.pk).metadata
    assert stored["source"] == "signup"
    assert stored["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    bulk = list(Job.objects.filter(queue=QUEUE).exclude(pk=job.pk).order_by("id"))
    assert [j.metadata.get("traceparent") for j in bulk] == [stored["traceparent"]] * 2

    with running_worker(make_config([QUEUE]), registry=_registry()):
        wait_for_row(job.pk, state="completed")
        spans = {j.pk: _run_span(exporter, j.pk) for j in [job, *bulk]}

    run = spans[job.pk]
    assert run.context.trace_id == context.trace_id
    assert run.parent is not None and run.parent.span_id == context.span_id
    assert [link.context.span_id for link in run.links] == [context.span_id]
    assert run.kind == trace.SpanKind.CONSUMER
    assert run.name == "awa.job work"
    assert run.attributes["awa.job.kind"] == "work"
    assert run.attributes["messaging.destination.name"] == QUEUE
    assert run.attributes["awa.job.attempt"] == 1
    assert run.attributes["awa.job.outcome"] == "completed"
    for other in bulk:
        assert spans[other.pk].context.trace_id == context.trace_id
    broken = spans[bulk[1].pk]
    assert broken.attributes["awa.job.outcome"] == "retryable"
    assert broken.status.status_code == trace.StatusCode.ERROR
    assert "broken on purpose" in (broken.status.description or "")


@pytest.mark.django_db(transaction=True)
def test_trace__enqueue_outside_a_span__no_traceparent_and_a_root_run_span(
    tracer: trace.Tracer, exporter: InMemorySpanExporter
) -> None:
    job = Job.objects.enqueue("work", queue=QUEUE)
    Job.objects.enqueue_many([{"kind": "work", "queue": QUEUE}])
    assert all("traceparent" not in j.metadata for j in Job.objects.all())
    with running_worker(make_config([QUEUE]), registry=_registry()):
        run = _run_span(exporter, job.pk)
    assert run.parent is None and not run.links


@pytest.mark.django_db(transaction=True)
def test_otel_metrics__counter_histograms_and_gauges() -> None:
    reader = InMemoryMetricReader()
    sink = Sink(meter_provider=MeterProvider(metric_readers=[reader]))
    with running_worker(make_config([QUEUE]), registry=_registry(), metrics=sink):
        ids = [Job.objects.enqueue("work", queue=QUEUE).pk for _ in range(5)]
        for job_id in ids:
            wait_for_row(job_id, state="completed")
        points = _points(reader)
        wait_until(lambda: _sum(_points(reader), "awa.jobs", outcome="completed") == 5, what="5 completed counted")
    assert _sum(points, "awa.queue.floor", queue=QUEUE) == 50  # the default max_workers, hard-reserved
    assert ("awa.worker.up", ()) in points
    assert _points(reader)[("awa.job.wait", (("kind", "work"), ("queue", QUEUE)))].count == 5
    assert _points(reader)[("awa.job.run", (("kind", "work"), ("queue", QUEUE)))].count == 5


def _points(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
    data = reader.get_metrics_data()
    found = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found[(metric.name, tuple(sorted((point.attributes or {}).items())))] = point
    return found


def _sum(points: dict[tuple[str, tuple[tuple[str, Any], ...]], Any], name: str, **labels: str) -> float:
    total = 0.0
    for (metric, attributes), point in points.items():
        if metric == name and set(labels.items()) <= set(attributes):
            total += point.value
    return total
