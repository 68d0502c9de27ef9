"""awa_django, from this checkout, in the bench's own Django project (bench.djproject.settings_awa).

Enqueue: ``Job.objects.enqueue(kind, args, queue=...)`` in autocommit (one transaction per job);
bulk: ``Job.objects.enqueue_many(specs)`` (COPY, one transaction). Worker, one process each:

    python bench/manage.py awa_worker -q <queue> [-q <queue> ...] [--global-max-workers N]

Hard-reserved runs set the queue's ``max_workers`` (the in-flight limit) in the ``awa_queue``
table before the worker starts; the weighted fairness run sets ``min_workers``/``weight`` there
and passes ``--global-max-workers``. Until the awa_worker command exists, every worker-based
measurement is reported as skipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bench.systems.base import REPO_ROOT, System, UnsupportedError

SETTINGS = "bench.djproject.settings_awa"


class AwaDjango(System):
    name = "awa_django"
    supports_weighted = True
    supports_cluster = True
    supports_metrics = True
    job_table = "awa_job"
    notes = ["this checkout; Job.objects.enqueue / enqueue_many; worker: manage.py awa_worker"]

    def __init__(self, db_url: str, workdir: Path) -> None:
        super().__init__(db_url, workdir)
        os.environ["DATABASE_URL"] = db_url
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        import django

        django.setup()
        from awa_django.models import Job, Queue

        self.Job, self.Queue = Job, Queue

    def distributions(self) -> list[str]:
        return ["awa-django", "Django", "psycopg"]

    def versions(self) -> dict[str, str]:
        import subprocess

        found = super().versions()
        found["awa-django"] = (
            "checkout "
            + subprocess.run(
                ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
        )
        return found

    def setup(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)

    def single_enqueue(self, n: int, queue: str = "bench") -> None:
        enqueue = self.Job.objects.enqueue
        for seq in range(n):
            enqueue("noop", {"seq": seq}, queue=queue)

    def enqueue_one(self, seq: int, queue: str = "bench") -> None:
        self.Job.objects.enqueue("noop", {"seq": seq}, queue=queue)

    def bulk_enqueue(
        self, n: int, *, kind: str = "noop", queue: str = "bench", seq_start: int = 0, ms: int | None = None
    ) -> None:
        if kind == "sleep":
            specs = [
                {"kind": kind, "queue": queue, "args": {"seq": seq_start + i, "ms": ms, "q": queue}} for i in range(n)
            ]
        else:
            specs = [{"kind": kind, "queue": queue, "args": {"seq": seq_start + i}} for i in range(n)]
        self.Job.objects.enqueue_many(specs)

    def prepare_worker(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> None:
        if find_spec("awa_django.management.commands.awa_worker") is None:
            raise UnsupportedError("awa_worker command not written yet (awa_django/management/commands/awa_worker.py)")
        for queue in queues:
            if weighted is None:
                defaults = {"max_workers": concurrency}
            else:
                spec = weighted["queues"][queue]
                defaults = {"min_workers": int(spec["min"]), "weight": int(spec["weight"])}
            self.Queue.objects.update_or_create(name=queue, defaults=defaults)
        if weighted is not None and weighted.get("scope") == "cluster":
            from awa_django.models import ClusterSettings

            ClusterSettings.objects.update_or_create(id=1, defaults={"global_max_workers": int(weighted["global_max"])})

    def worker_command(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> list[str]:
        cmd = [self.python, str(REPO_ROOT / "bench" / "manage.py"), "awa_worker"]
        for queue in queues:
            cmd += ["-q", queue]
        if weighted is not None:
            cmd += ["--global-max-workers", str(int(weighted["global_max"]))]
            if weighted.get("scope") == "cluster":
                cmd += ["--capacity-scope", "cluster"]
        if self.worker_metrics:
            # The drain_metrics row: the Prometheus sink recording every job, served on a free port.
            cmd += ["--metrics", self.worker_metrics]
            if self.worker_metrics == "prometheus":
                cmd += ["--metrics-port", str(_free_port())]
        return cmd

    def worker_env(self, log_path: Path) -> dict[str, str]:
        env = super().worker_env(log_path)
        env["DJANGO_SETTINGS_MODULE"] = SETTINGS
        return env

    # Storage (migration 0023): awa_job holds the unfinished jobs only; a completion moves its row
    # to awa_job_done. A count of completed rows in awa_job stays 0 (the drain then waited out its
    # timeout, every awa_django row an error), so finished jobs are counted, and added, there.
    def count_completed(self) -> int:
        return int(self.scalar("SELECT count(*) FROM awa_job_done WHERE state = 'completed'"))

    def count_unfinished(self) -> int:
        return int(
            self.scalar(
                "SELECT count(*) FROM awa_job WHERE state IN ('scheduled', 'available', 'running', 'retryable')"
            )
        )

    def add_finished_rows(self, n: int) -> None:
        self.sql(
            """
            INSERT INTO awa_job_done (id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
                                      attempted_at, attempted_by, finalized_at, created_at, errors, metadata,
                                      tags, run_lease, fair_key, pending)
            SELECT nextval(pg_get_serial_sequence('awa_job', 'id')), 'noop', 'bench',
                   jsonb_build_object('seq', -1000000 - g), 'completed', 2, 1, 25,
                   now() - interval '1 hour', now() - interval '1 hour', 'bench', now() - interval '1 hour',
                   now() - interval '1 hour', '[]'::jsonb, '{}'::jsonb, '{}', 1, '', 0
            FROM generate_series(1, %s) g
            """,
            [n],
        )
        self.sql("VACUUM ANALYZE awa_job_done")

    def close(self) -> None:
        from django.db import connections

        connections.close_all()
        super().close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def make(db_url: str, workdir: Path) -> AwaDjango:
    return AwaDjango(db_url, workdir)
