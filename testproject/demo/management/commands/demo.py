"""``manage.py demo``: migrate, enqueue a mix of demo jobs, resume the demo schedule, and run the
worker on them."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, OutputWrapper
from django.db import close_old_connections, connection
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from awa_django.models import Job
from awa_django.services.schedules import resume_schedules, sync_schedules


class Command(BaseCommand):
    help = (
        "Migrate, enqueue demo jobs (noop, sleep, fail, scheduled), resume the demo_tick schedule "
        "and run awa_worker until Ctrl-C."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--jobs", type=int, default=1000, help="how many noop jobs to enqueue")
        parser.add_argument("--no-worker", action="store_true", help="only migrate and enqueue")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        first = (Job.objects.aggregate(last=Max("id"))["last"] or 0) + 1
        Job.objects.enqueue_many([{"kind": "noop", "args": {}} for _ in range(options["jobs"])])
        Job.objects.enqueue_many(
            [{"kind": "sleep", "args": {"seconds": 0.5 + i / 10}, "queue": "default"} for i in range(10)]
        )
        failing = Job.objects.enqueue("fail", {"message": "boom (this demo job always fails)"}, max_attempts=3)
        later = Job.objects.enqueue("noop", run_at=timezone.now() + timedelta(seconds=5))
        last = Job.objects.aggregate(last=Max("id"))["last"] or 0
        self.stdout.write(
            f"enqueued {options['jobs']} noop, 10 sleep, fail #{failing.pk} (3 attempts), "
            f"and noop #{later.pk} scheduled 5 s ahead"
        )
        sync_schedules()  # awa_worker does this too; here so that the schedule can be resumed first
        resume_schedules(["demo_tick"])
        self.stdout.write("schedule demo_tick fires every 10 s (see its jobs in the Schedule admin)")
        if not options["no_worker"]:
            self.stdout.write("starting the worker; press Ctrl-C to stop it")
            stop = threading.Event()
            watcher = threading.Thread(
                target=summarise, args=(first, last, self.stdout, stop), name="demo-summary", daemon=True
            )
            watcher.start()
            try:
                call_command("awa_worker", verbosity=options["verbosity"])
            finally:
                stop.set()


PENDING = Q(state__in=["scheduled", "available", "running", "retryable"])


def summarise(first: int, last: int, out: OutputWrapper, stop: threading.Event, interval: float = 1.0) -> None:
    """Once none of the demo's jobs (ids first..last) is waiting or running, print how they ended."""
    try:
        while not stop.wait(interval):
            jobs = Job.objects.filter(id__gte=first, id__lte=last)
            totals = jobs.aggregate(
                pending=Count("id", filter=PENDING),
                completed=Count("id", filter=Q(state="completed")),
                failed=Count("id", filter=Q(state="failed")),
                cancelled=Count("id", filter=Q(state="cancelled")),
                attempts=Sum("attempt"),
                total=Count("id"),
            )
            if totals["pending"]:
                continue
            retries = (totals["attempts"] or 0) - totals["total"]
            out.write(
                f"demo queue empty: {totals['completed']} completed, {totals['failed']} failed, "
                f"{totals['cancelled']} cancelled, {max(retries, 0)} retries (attempts after the first); "
                "the demo_tick schedule keeps firing; Ctrl-C to stop"
            )
            return
    finally:
        close_old_connections()
        connection.close()
