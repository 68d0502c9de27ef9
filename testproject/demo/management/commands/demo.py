"""``manage.py demo``: migrate, enqueue a mix of demo jobs, resume the demo schedule, and run the
worker on them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.utils import timezone

from awa_django.models import Job
from awa_django.services import resume_schedules, sync_schedules


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
        Job.objects.enqueue_many([{"kind": "noop", "args": {}} for _ in range(options["jobs"])])
        Job.objects.enqueue_many(
            [{"kind": "sleep", "args": {"seconds": 0.5 + i / 10}, "queue": "default"} for i in range(10)]
        )
        failing = Job.objects.enqueue("fail", {"message": "boom (this demo job always fails)"}, max_attempts=3)
        later = Job.objects.enqueue("noop", run_at=timezone.now() + timedelta(seconds=5))
        self.stdout.write(
            f"enqueued {options['jobs']} noop, 10 sleep, fail #{failing.pk} (3 attempts), "
            f"and noop #{later.pk} scheduled 5 s ahead"
        )
        sync_schedules()  # awa_worker does this too; here so that the schedule can be resumed first
        resume_schedules(["demo_tick"])
        self.stdout.write("schedule demo_tick fires every 10 s (see its jobs in the Schedule admin)")
        if not options["no_worker"]:
            self.stdout.write("starting the worker; press Ctrl-C to stop it")
            call_command("awa_worker", verbosity=options["verbosity"])
