"""Trace context across the queue, when OpenTelemetry is installed (extra ``awa-django[otel]``).

At enqueue, ``with_traceparent`` stores the current span's W3C ``traceparent`` (and
``tracestate``) in the job's metadata; at run time, ``attempt_span`` runs each attempt in a span
whose parent is that context (so the run shares the enqueuing request's trace id) and which links
to it, with the job's attributes. Without OpenTelemetry both are free: ``with_traceparent`` returns
its argument and ``attempt_span`` a null context. With the API but no SDK configured (the global
tracer provider is still the API's proxy or its no-op provider) ``attempt_span`` is a null context
too, checked per attempt, so a provider set later is picked up: building the API's no-op span per job
cost about a fifth of the worker's per-job Python (bench/README.md, the profile).

Sync handlers run in worker threads without the span as their current context: a handler that
wants child spans starts them from ``context.metadata["traceparent"]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from awa_django.states import JobState

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: propagation is off, at no cost
    _trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from awa_django.context import ClaimedJob, Outcome

TRACEPARENT = "traceparent"
_propagator = TraceContextTextMapPropagator() if _trace is not None else None


def current_trace() -> dict[str, str] | None:
    """The current span's ``traceparent`` (and ``tracestate``) as metadata keys, or None."""
    if _trace is None or not _trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    assert _propagator is not None
    _propagator.inject(carrier)
    return carrier


def with_traceparent(metadata: Any) -> Any:
    """``metadata`` with the current span's ``traceparent`` added, or unchanged (no OpenTelemetry,
    no current span, metadata already carrying one, or metadata that is not a mapping: that is for
    the enqueue validation to reject)."""
    if _trace is None:
        return metadata
    span_context = _trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return metadata
    if metadata is not None and (not isinstance(metadata, Mapping) or TRACEPARENT in metadata):
        return metadata
    return {**(metadata or {}), **(current_trace() or {})}


_NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def spans_recorded() -> bool:
    """Whether a tracer provider that records spans is configured (an SDK's, or any but the API's own)."""
    if _trace is None:
        return False
    # The API returns its proxy only while no provider is set (in code or by environment variable),
    # and the proxy's tracers are no-op ones until then.
    return not isinstance(_trace.get_tracer_provider(), (ProxyTracerProvider, NoOpTracerProvider))


def attempt_span(job: ClaimedJob) -> contextlib.AbstractContextManager[Any]:
    """A span around one attempt (the CONSUMER side of the enqueue), or a null context (None) when
    no span would be recorded."""
    if not spans_recorded():
        return _NO_SPAN
    return _recorded_span(job)


@contextlib.contextmanager
def _recorded_span(job: ClaimedJob) -> Iterator[Any]:
    assert _trace is not None
    parent = None
    links = None
    metadata = job.metadata
    if isinstance(metadata, dict) and TRACEPARENT in metadata:
        assert _propagator is not None
        parent = _propagator.extract({k: v for k, v in metadata.items() if isinstance(v, str)})
        remote = _trace.get_current_span(parent).get_span_context()
        links = [Link(remote)] if remote.is_valid else None
    tracer = _trace.get_tracer("awa_django")
    with tracer.start_as_current_span(
        f"awa.job {job.kind}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "awa",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "awa.job.kind": job.kind,
            "awa.job.attempt": job.attempt,
            "awa.job.max_attempts": job.max_attempts,
            "awa.job.priority": job.priority,
        },
    ) as span:
        yield span


def end_attempt(span: Any, outcome: Outcome) -> None:
    """Record the attempt's outcome on its span (an error status unless it completed or snoozed)."""
    if span is None or _trace is None:
        return
    span.set_attribute("awa.job.outcome", outcome.state)
    if outcome.state in (JobState.RETRYABLE, JobState.FAILED, JobState.CANCELLED):
        error = (outcome.error or {}).get("error")
        span.set_status(Status(StatusCode.ERROR, str(error) if error is not None else outcome.state))
