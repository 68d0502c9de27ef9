"""The cluster's queue depth as Prometheus gauges, from the database, once per scrape.

Wire it into your URLs (``path("awa/", include("awa_django.urls"))`` serves it at
``/awa/metrics``) and scrape it from one place: every worker sees the same rows, so these gauges
belong to no worker. It answers active staff users (the admin's login) and, when
``AWA['METRICS_TOKEN']`` is set, requests with ``Authorization: Bearer <token>``; anyone else gets
401 (token set) or 403, unless ``AWA['METRICS_OPEN']`` opens it on purpose: queue names and depths
are the project's business, so closed is the default.

Gauges:

- ``awa_queue_jobs{queue,state}``: jobs waiting or running (scheduled, available, running,
  retryable). Finished jobs are counted by the workers (``awa_jobs_total``), not here: counting
  them would scan the retained history on every scrape.
- ``awa_queue_parked_jobs{queue,parked}``: durable jobs parked in a sleep (``parked="sleeping"``,
  also counted as ``scheduled`` above) or in a wait for an event (``parked="waiting"``): they hold
  no slot; each queue with jobs gets both series.
- ``awa_queue_oldest_available_age_seconds{queue}``: how long the oldest due job has waited
  (0 when none): the queue lag to alert on.
- ``awa_queue_paused{queue}``: 1 if the queue is paused.
- ``awa_queue_key_jobs{queue,state,key}``: available and running jobs of the ``AWA['FAIR_KEYS_TOP']``
  fairness keys with the most of them, per queue and state, and ``key="other"`` for the sum of the
  rest (a key named "other" is added to it): the series stay bounded however many keys there are.
- ``awa_workers_live``, ``awa_workers_leader``: worker snapshots seen within the heartbeat
  staleness, and how many of them say they lead maintenance (alert when either is 0).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from awa_django.conf import awa_settings
from awa_django.states import JobState

DEPTH_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE)


def depth_samples() -> dict[str, list[tuple[dict[str, str], float]]]:
    """{metric name: [(labels, value)]} read from the database now (six ORM queries and the
    top keys' statement)."""
    from awa_django.models import Job, Queue, WorkerInstance
    from awa_django.services.keys import OTHER_KEY, top_keys
    from awa_django.services.steps import SLEEPING, WAITING, parked_counts

    alias = awa_settings().DATABASE_ALIAS
    now = timezone.now()
    queues = {q.name: q.paused for q in Queue.objects.using(alias).only("name", "paused")}
    counts = {
        (row["queue"], row["state"]): row["n"]
        for row in Job.objects.using(alias)
        .filter(state__in=DEPTH_STATES)
        .values("queue", "state")
        .annotate(n=Count("id"))
        .order_by()
    }
    oldest = {
        row["queue"]: row["oldest"]
        for row in Job.objects.using(alias)
        .filter(state=JobState.AVAILABLE, run_at__lte=now)
        .values("queue")
        .annotate(oldest=Min("run_at"))
        .order_by()
    }
    parked = parked_counts()
    names = sorted(set(queues) | {queue for queue, _ in counts} | set(oldest) | set(parked))
    staleness = timedelta(seconds=awa_settings().HEARTBEAT_STALENESS)
    live = list(
        WorkerInstance.objects.using(alias).filter(last_seen_at__gte=now - staleness).values_list("flags", flat=True)
    )
    key_jobs: dict[tuple[str, str, str], float] = {}
    for queue, per_state in top_keys(awa_settings().FAIR_KEYS_TOP).items():
        for state, entries in per_state.items():
            for entry in entries:
                label = OTHER_KEY if entry.other else entry.key
                key_jobs[(queue, state, label)] = key_jobs.get((queue, state, label), 0.0) + entry.jobs
    return {
        "awa_queue_key_jobs": [
            ({"queue": q, "state": s, "key": k}, value) for (q, s, k), value in sorted(key_jobs.items())
        ],
        "awa_queue_jobs": [
            ({"queue": q, "state": s}, float(counts.get((q, s), 0))) for q in names for s in DEPTH_STATES
        ],
        "awa_queue_parked_jobs": [
            ({"queue": q, "parked": how}, float(parked.get(q, {}).get(how, 0)))
            for q in names
            for how in (SLEEPING, WAITING)
        ],
        "awa_queue_oldest_available_age_seconds": [
            ({"queue": q}, max((now - oldest[q]).total_seconds(), 0.0) if q in oldest else 0.0) for q in names
        ],
        "awa_queue_paused": [({"queue": q}, float(queues.get(q, False))) for q in names],
        "awa_workers_live": [({}, float(len(live)))],
        "awa_workers_leader": [
            ({}, float(sum(1 for flags in live if isinstance(flags, dict) and flags.get("leader"))))
        ],
    }


HELP = {
    "awa_queue_jobs": "Jobs waiting or running, by queue and state (from the database).",
    "awa_queue_parked_jobs": "Durable jobs parked in a sleep or a wait for an event, by queue (they hold no slot).",
    "awa_queue_oldest_available_age_seconds": "Age of the oldest due, unclaimed job of the queue (0 when none).",
    "awa_queue_paused": "1 if the queue is paused.",
    "awa_queue_key_jobs": "Available and running jobs of the fairness keys with the most, per queue and state; "
    'key="other" sums the rest (AWA["FAIR_KEYS_TOP"] keys are named).',
    "awa_workers_live": "Workers whose snapshot is fresher than the heartbeat staleness.",
    "awa_workers_leader": "Live workers that report being the maintenance leader (1 expected).",
}


def exposition() -> bytes:
    """The depth gauges in Prometheus' text format (needs prometheus-client)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    samples = depth_samples()

    class Depth(Collector):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            for name, values in samples.items():
                labels = sorted(values[0][0]) if values else []
                family = GaugeMetricFamily(name, HELP[name], labels=labels)
                for label_values, value in values:
                    family.add_metric([label_values[k] for k in labels], value)
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Depth())
    return generate_latest(registry)


def refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics, else the response saying what it lacks."""
    current = awa_settings()
    token = current.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        if hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return None
    user = getattr(request, "user", None)
    if current.METRICS_OPEN or (user is not None and user.is_active and user.is_staff):
        return None
    if token:
        return HttpResponse(
            "awa metrics: send 'Authorization: Bearer <AWA['METRICS_TOKEN']>', or log in as staff\n",
            status=401,
            content_type="text/plain",
        )
    return HttpResponse(
        "awa metrics: log in as a staff user, set AWA['METRICS_TOKEN'] and send it as "
        "'Authorization: Bearer <token>', or set AWA['METRICS_OPEN'] = True to open this view to anyone\n",
        status=403,
        content_type="text/plain",
    )


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    try:
        body = exposition()
    except ImportError as exc:
        return HttpResponse(
            f"awa metrics need prometheus-client ({exc}): pip install 'awa-django[metrics]'\n",
            status=501,
            content_type="text/plain",
        )
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")
