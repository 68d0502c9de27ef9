"""``manage.py awa_worker``: parse, validate, run the worker until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from awa_django.exceptions import ConfigurationError
from awa_django.management.arguments import positive_int, seconds, seconds_or_zero


class Command(BaseCommand):
    help = "Run an awa_django worker: one dispatcher per queue, until SIGTERM/SIGINT (a second signal stops at once)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="serve this queue (repeatable); default: every Queue row plus every queue a @job names",
        )
        parser.add_argument(
            "--global-max-workers",
            type=positive_int,
            metavar="N",
            help="weighted mode: at most N jobs at once in this worker, shared by weight over min_workers "
            "(default: AWA['GLOBAL_MAX_WORKERS']; unset = hard-reserved, each queue its max_workers)",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=seconds_or_zero,
            metavar="SECONDS",
            help="time in-flight jobs get to finish after SIGTERM/SIGINT",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds,
            metavar="SECONDS",
            help="seconds between polls when no NOTIFY arrives",
        )
        parser.add_argument("--heartbeat-interval", type=seconds, metavar="SECONDS")
        parser.add_argument(
            "--capacity-scope",
            choices=["process", "cluster"],
            help="process: the capacity settings hold in this process (default); cluster: for every "
            "live worker together (AWA['CAPACITY_SCOPE'])",
        )
        parser.add_argument(
            "--heartbeat-staleness",
            type=seconds,
            metavar="SECONDS",
            help="a running job whose heartbeat is older than this is rescued",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from awa_django.models import Queue
        from awa_django.registry import registry
        from awa_django.worker import Worker, build_config

        self._configure_logging(options["verbosity"])
        queues = options["queues"]
        if queues:
            bad = [q for q in queues if not q.strip() or len(q) > 255]
            if bad:
                raise CommandError(f"invalid queue name {bad[0]!r}: use 1 to 255 characters")
        rows: list[dict[str, Any]] = [
            {
                "name": queue.name,
                "max_workers": queue.max_workers,
                "min_workers": queue.min_workers,
                "weight": queue.weight,
                "rate_limit": queue.rate_limit,
                "rate_burst": queue.rate_burst,
                "paused": queue.paused,
                "deadline_seconds": queue.deadline.total_seconds() if queue.deadline else None,
                "priority_aging_seconds": queue.priority_aging.total_seconds() if queue.priority_aging else None,
            }
            for queue in Queue.objects.all()
        ]
        try:
            config = build_config(
                queue_rows=rows,
                handler_queues=registry.queues(),
                queues=queues,
                global_max_workers=options["global_max_workers"],
                shutdown_timeout=options["shutdown_timeout"],
                poll_interval=options["poll_interval"],
                heartbeat_interval=options["heartbeat_interval"],
                heartbeat_staleness=options["heartbeat_staleness"],
                capacity_scope=options["capacity_scope"],
            )
        except ConfigurationError as exc:
            raise CommandError(f"{exc}") from exc
        # Every served queue gets a Queue row, so operators see it in the admin and can tune it.
        known = {row["name"] for row in rows}
        Queue.objects.bulk_create(
            [Queue(name=name) for name in config.queues if name not in known], ignore_conflicts=True
        )
        # Periodic jobs declared in code become Schedule rows (the maintenance leader fires them).
        from awa_django.services import sync_schedules

        synced = sync_schedules()
        if synced.created or synced.updated or synced.removed:
            logging.getLogger("awa_django").info(
                "schedules synchronised from code created=%s updated=%s disabled=%s",
                synced.created,
                synced.updated,
                synced.removed,
            )
        worker = Worker(config)
        try:
            asyncio.run(worker.run())
        except KeyboardInterrupt:  # pragma: no cover - signals are handled on the loop
            pass
        if worker.executor.sync_running:
            logging.getLogger("awa_django").warning(
                "%d sync handler(s) still running in threads; exiting without waiting for them "
                "(their jobs were handed back or will be rescued)",
                worker.executor.sync_running,
            )
            os._exit(1)
        if worker.failure is not None:
            raise CommandError(f"worker stopped after a failure: {worker.failure!r}")

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("awa_django")
        level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
        if verbosity != 1 or logger.level == logging.NOTSET:
            logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            logger.addHandler(handler)
