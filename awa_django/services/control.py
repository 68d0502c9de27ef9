"""Asking one worker to act, through the database: drain and stop, hold a queue, resume it.

Each call validates against the worker's snapshot (``WorkerInstance``) and raises
``WorkerRequestError`` naming the worker, the value and what to do instead; otherwise it inserts
one ``WorkerRequest`` row and NOTIFYs the workers' settings channel, both in the caller's
transaction (the worker hears of it at commit). The worker acts on its next settings re-read tick
and acknowledges the row (``awa_django.worker.control``); until then the request is pending.

Locking: one insert; no row of the worker's is locked, its snapshot writes never wait on this.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from awa_django.exceptions import WorkerRequestError
from awa_django.models import WorkerAction, WorkerInstance, WorkerRequest
from awa_django.services.cluster import default_stale_after
from awa_django.services.db import database_alias, notify
from awa_django.snapshot import SnapshotFormatError, WorkerFlags
from awa_django.sql import QUEUES_CHANNEL, statements


def pending_requests(worker: WorkerInstance) -> list[WorkerRequest]:
    """The worker's requests not acknowledged yet, oldest first."""
    return list(
        WorkerRequest.objects.using(database_alias())
        .filter(instance_id=worker.instance_id, acknowledged_at__isnull=True)
        .order_by("id")
    )


def held_queues(worker: WorkerInstance) -> tuple[str, ...]:
    """The queues the worker says it holds (its snapshot flags; () when they cannot be read)."""
    try:
        return WorkerFlags.from_json(worker.flags).held_queues
    except SnapshotFormatError:
        return ()


def _check_live(worker: WorkerInstance) -> None:
    seconds = default_stale_after()
    age = (timezone.now() - worker.last_seen_at).total_seconds()
    if age > seconds:
        raise WorkerRequestError(
            str(worker),
            f"worker {worker} is gone: its last snapshot is {age:.0f}s old (live workers write one within "
            f"{seconds:g}s); nothing was sent. Its row is removed once stale; start a new worker instead",
        )
    flags = worker.flags if isinstance(worker.flags, dict) else {}
    if flags.get("stopping"):
        raise WorkerRequestError(str(worker), f"worker {worker} is already stopping; nothing was sent")


def _check_queue(worker: WorkerInstance, queue: str) -> None:
    served = sorted(worker.queues) if isinstance(worker.queues, dict) else []
    if queue not in served:
        shown = ", ".join(served[:20]) + (f", … ({len(served)} queues)" if len(served) > 20 else "")
        raise WorkerRequestError(
            str(worker), f"worker {worker} does not serve queue {queue!r}; it serves: {shown or 'no queue'}"
        )


def _send(worker: WorkerInstance, action: str, queue: str, requested_by: str) -> WorkerRequest:
    alias = database_alias()
    with transaction.atomic(using=alias):
        request = WorkerRequest.objects.using(alias).create(
            instance_id=worker.instance_id, worker=str(worker), action=action, queue=queue, requested_by=requested_by
        )
        notify(statements["notify_worker_requests"], {"channel": QUEUES_CHANNEL, "worker": str(worker)})
    return request


def _already(worker: WorkerInstance, action: str, queue: str) -> bool:
    return (
        WorkerRequest.objects.using(database_alias())
        .filter(instance_id=worker.instance_id, acknowledged_at__isnull=True, action=action, queue=queue)
        .exists()
    )


def request_drain(worker: WorkerInstance, *, requested_by: str = "") -> WorkerRequest:
    """Ask the worker to stop as on SIGTERM: no new claims, running jobs finish within its shutdown
    timeout or are handed back, exit 0."""
    _check_live(worker)
    if _already(worker, WorkerAction.DRAIN, ""):
        raise WorkerRequestError(str(worker), f"worker {worker} was already asked to drain; it has not answered yet")
    return _send(worker, WorkerAction.DRAIN, "", requested_by)


def request_hold(worker: WorkerInstance, queue: str, *, requested_by: str = "") -> WorkerRequest:
    """Ask the worker to stop claiming ``queue`` (its running jobs of the queue finish)."""
    _check_live(worker)
    _check_queue(worker, queue)
    if queue in held_queues(worker) or _already(worker, WorkerAction.HOLD, queue):
        raise WorkerRequestError(str(worker), f"worker {worker} already holds queue {queue!r} (or was asked to)")
    return _send(worker, WorkerAction.HOLD, queue, requested_by)


def request_resume(worker: WorkerInstance, queue: str, *, requested_by: str = "") -> WorkerRequest:
    """Ask the worker to claim a queue it holds again."""
    _check_live(worker)
    _check_queue(worker, queue)
    if queue not in held_queues(worker) and not _already(worker, WorkerAction.HOLD, queue):
        raise WorkerRequestError(str(worker), f"worker {worker} does not hold queue {queue!r}; nothing to resume")
    return _send(worker, WorkerAction.RESUME, queue, requested_by)


def recent_requests(worker: WorkerInstance, within: timedelta = timedelta(hours=1)) -> list[WorkerRequest]:
    """The worker's requests of the last ``within``, newest first (at most 20)."""
    since = timezone.now() - within
    return list(
        WorkerRequest.objects.using(database_alias())
        .filter(instance_id=worker.instance_id, requested_at__gte=since)
        .order_by("-id")[:20]
    )
