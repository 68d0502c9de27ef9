"""Operator actions and read models: what the admin, the dashboard and ``awa_health`` share, one
module per subject.

- ``jobs``: retry, cancel and discard jobs (each with its locking contract).
- ``queues``: pause and resume queues.
- ``stats``: the queues' job counts, throughput, and how ages are shown.
- ``cluster``: the live workers, their capacity per queue, capacity scope "cluster".
- ``schedules``: periodic jobs, synced from code and edited by operators.

The admin's actions call exactly these functions; so can your code. The names below are
re-exported for it (``from awa_django.services import pause_schedules``); the package's own
modules import from the submodule.
"""

from awa_django.services.cluster import (
    QueueCapacity,
    capacities_by_queue,
    cluster_capacity,
    default_stale_after,
    global_maximums,
    live_workers,
    worker_healthy,
)
from awa_django.services.jobs import CANCELLABLE_FROM, RETRYABLE_FROM, cancel_jobs, discard_jobs, retry_jobs
from awa_django.services.queues import pause_queues, resume_queues
from awa_django.services.schedules import (
    SCHEDULE_CODE_FIELDS,
    ScheduleSync,
    next_fire_after,
    pause_schedules,
    resume_schedules,
    run_schedules_now,
    save_schedule,
    sync_schedules,
)
from awa_django.services.stats import (
    COUNTED_STATES,
    QueueStats,
    Throughput,
    estimated_job_count,
    format_age,
    job_counts,
    queue_stats,
    throughput,
)

__all__ = [
    "CANCELLABLE_FROM",
    "COUNTED_STATES",
    "RETRYABLE_FROM",
    "SCHEDULE_CODE_FIELDS",
    "QueueCapacity",
    "QueueStats",
    "ScheduleSync",
    "Throughput",
    "cancel_jobs",
    "capacities_by_queue",
    "cluster_capacity",
    "default_stale_after",
    "discard_jobs",
    "estimated_job_count",
    "format_age",
    "global_maximums",
    "job_counts",
    "live_workers",
    "next_fire_after",
    "pause_queues",
    "pause_schedules",
    "queue_stats",
    "resume_queues",
    "resume_schedules",
    "retry_jobs",
    "run_schedules_now",
    "save_schedule",
    "sync_schedules",
    "throughput",
    "worker_healthy",
]
