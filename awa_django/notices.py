"""Enqueue-time warnings: a job nobody will run should not wait in silence.

Two mistakes look like success at enqueue time and only show up as jobs that never run:

- a kind with no handler (a typo, or ``<app>/jobs.py`` not imported): the worker that claims it
  fails it as an unknown kind;
- a queue no live worker serves (``Job.objects.enqueue("send_welcome", …)`` into ``default``
  while the only worker runs ``-q emails``): its jobs wait forever.

Each is logged once per process, per kind and per queue, at WARNING: a kind on the
``awa_django.enqueue`` logger (with ``kind`` in the record's extra), a queue on
``awa_django.managers``. Which queues live workers
serve comes from their ``WorkerInstance`` snapshots, read at most once per snapshot staleness
window (``AwaSettings.worker_stale_after``) and only when a queue not yet known to be served
is seen, so a steady stream of enqueues into served queues costs set lookups, not queries.
The read runs on the caller's connection inside a savepoint: if it fails, the caller's
transaction is untouched and the check is skipped (logged at DEBUG).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from django.apps import apps
from django.db import DatabaseError, transaction

logger = logging.getLogger("awa_django.managers")
# The one warning about a kind with no handler (the enqueue API's own logger; structured: kind).
kind_logger = logging.getLogger("awa_django.enqueue")


class EnqueueNotices:
    """Per-process memory of what was checked and what was already said."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known_kinds: set[str] = set()
        self._warned_kinds: set[str] = set()
        self._warned_queues: set[str] = set()
        self._served: frozenset[str] = frozenset()
        self._served_at: float | None = None  # monotonic time of the last read, None: never read

    def reset(self) -> None:
        """Forget everything (tests; a long-lived process that wants to be told again)."""
        with self._lock:
            self.__init__()  # type: ignore[misc]

    def after_enqueue(self, alias: str, kinds: Iterable[str], queues: Iterable[str]) -> None:
        for kind in kinds:
            if kind not in self._known_kinds and kind not in self._warned_kinds:
                self._check_kind(kind)
        for queue in queues:
            if queue not in self._served and queue not in self._warned_queues:
                self._check_queue(alias, queue)

    def _check_kind(self, kind: str) -> None:
        from awa_django.handlers import registry

        handler = registry.get(kind)  # a @job handler, or a resolver's (a Tasks framework @task)
        if handler is not None and not getattr(handler.func, "awa_unresolved", False):
            self._known_kinds.add(kind)
            return
        with self._lock:
            if kind in self._warned_kinds:
                return
            self._warned_kinds.add(kind)
        kind_logger.warning(
            "enqueued a job of a kind with no registered handler kind=%s: a worker fails such jobs as an "
            "unknown kind; check the spelling, or register it with @job(%r, ...) in an installed app's jobs.py "
            "(ignore this if only your worker processes load that handler; logged once per kind)",
            kind,
            kind,
            extra={"kind": kind, "outcome": "unknown_kind"},
        )

    def _check_queue(self, alias: str, queue: str) -> None:
        from awa_django.conf import awa_settings

        current = awa_settings()
        if current.EXECUTION == "immediate":  # jobs run in-process: no worker needed
            return
        stale_after = current.worker_stale_after
        now = time.monotonic()
        if self._served_at is None or now - self._served_at >= stale_after:
            served = self._read_served(alias, stale_after)
            if served is None:
                return
            self._served, self._served_at = served, now
            if queue in served:
                return
        elif queue in self._served:
            return
        with self._lock:
            if queue in self._warned_queues:
                return
            self._warned_queues.add(queue)
        logger.warning(
            "enqueued a job into a queue no live worker serves queue=%s live_workers_serve=%s: its jobs wait "
            "until a worker runs it (python manage.py awa_worker -q %s, or a worker without -q once a @job "
            "handler uses it) (logged once per queue)",
            queue,
            ",".join(sorted(self._served)) or "-",
            queue,
        )

    @staticmethod
    def _read_served(alias: str, stale_after: float) -> frozenset[str] | None:
        from datetime import timedelta

        from django.utils import timezone

        # Through the app registry: the enqueue API (managers, which models imports) reaches this
        # module, so it does not import the models.
        worker_instance = apps.get_model("awa", "WorkerInstance")
        cutoff = timezone.now() - timedelta(seconds=stale_after)
        try:
            with transaction.atomic(using=alias):  # a savepoint inside the caller's transaction
                snapshots = list(
                    worker_instance._default_manager.using(alias)
                    .filter(last_seen_at__gte=cutoff)
                    .values_list("queues", flat=True)
                )
        except DatabaseError as exc:
            logger.debug("could not read the live workers' queues, skipping the check alias=%s error=%s", alias, exc)
            return None
        served: set[str] = set()
        for queues in snapshots:
            if isinstance(queues, dict):
                served.update(str(name) for name in queues)
        return frozenset(served)


notices = EnqueueNotices()
