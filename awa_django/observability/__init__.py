"""Seeing what the workers do: per-job log lines, metrics, traces.

- ``joblog``: one log line per attempt outcome on the ``awa_django.jobs`` logger, each with
  structured ``extra`` fields (job_id, kind, queue, attempt, duration_ms, outcome), so a JSON
  formatter or structlog picks them up.
- ``sink``: the ``MetricsSink`` the worker calls on its hot path (a few counter increments per
  job), a no-op by default; ``load_sink`` picks the Prometheus or OpenTelemetry one by name.
- ``prometheus`` (extra ``awa-django[metrics]``) and ``otel`` (extra ``awa-django[otel]``): the
  two implementations; nothing imports them unless asked to.
- ``tracing``: the W3C ``traceparent`` of the current span stored in a job's metadata at enqueue,
  and a span per attempt whose parent it is (free when OpenTelemetry is not installed).
- ``views``: a Django view with the queue depth gauges, read from the database once per scrape.
"""

from awa_django.observability.sink import OUTCOMES, MetricsSink, NoopSink, load_sink

__all__ = ["OUTCOMES", "MetricsSink", "NoopSink", "load_sink"]
