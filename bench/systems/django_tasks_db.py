"""django-tasks-db: the database backend of Django's Tasks API (the django-tasks backport on 5.2).

Single enqueue: ``task.enqueue(...)`` in autocommit (the documented API). There is no bulk
enqueue API: the bulk path is ``DBTaskResult.objects.bulk_create`` of the rows the backend's
own ``enqueue`` would create (same fields; ``run_after`` set as its pre_save signal would).
Worker: ``manage.py db_worker --queue-name <q> --no-reload --no-startup-delay -v 0`` with
its default poll ``--interval 1``. db_worker runs one task at a time and has no concurrency
option, so "32 in flight" is 1 per process; more processes are the only way to scale it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.systems.base import REPO_ROOT, System

SETTINGS = "bench.djproject.settings_tasks"
INTERVAL = "1"  # db_worker's default poll interval (seconds); it has no LISTEN/NOTIFY


class DjangoTasksDb(System):
    name = "django_tasks_db"
    weighted_reason = "no weighted queues (one task at a time per db_worker process)"
    max_concurrency_per_process = 1
    notes = [
        f"db_worker: 1 task at a time per process (no concurrency option), poll --interval {INTERVAL}; "
        "bulk = ORM bulk_create (no bulk enqueue API)"
    ]

    def __init__(self, db_url: str, workdir: Path) -> None:
        super().__init__(db_url, workdir)
        os.environ["DATABASE_URL"] = db_url
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        import django

        django.setup()
        from django_tasks_db.models import DBTaskResult

        from bench.djproject.tasksbench import tasks

        self.DBTaskResult = DBTaskResult
        self.table = DBTaskResult._meta.db_table
        self.job_table = self.table
        self.tasks = tasks

    def distributions(self) -> list[str]:
        return ["django-tasks-db", "django-tasks", "Django", "psycopg"]

    def setup(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)

    def single_enqueue(self, n: int, queue: str = "bench") -> None:
        task = self.tasks.noop.using(queue_name=queue)
        for seq in range(n):
            task.enqueue(seq=seq)

    def enqueue_one(self, seq: int, queue: str = "bench") -> None:
        self.tasks.noop.using(queue_name=queue).enqueue(seq=seq)

    def bulk_enqueue(
        self, n: int, *, kind: str = "noop", queue: str = "bench", seq_start: int = 0, ms: int | None = None
    ) -> None:
        from django.db import transaction
        from django_tasks_db.models import get_date_max

        task = getattr(self.tasks, kind).using(queue_name=queue)
        backend = task.get_backend()
        run_after = get_date_max()

        def kwargs(seq: int) -> dict[str, Any]:
            return {"seq": seq} if kind == "noop" else {"seq": seq, "ms": ms, "q": queue}

        rows = [
            self.DBTaskResult(
                id=backend._get_id(),
                args_kwargs={"args": [], "kwargs": kwargs(seq_start + i)},
                priority=task.priority,
                task_path=task.module_path,
                queue_name=task.queue_name,
                run_after=run_after,
                backend_name=backend.alias,
            )
            for i in range(n)
        ]
        with transaction.atomic():
            self.DBTaskResult.objects.bulk_create(rows, batch_size=5000)

    def worker_command(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> list[str]:
        return [
            self.python,
            str(REPO_ROOT / "bench" / "manage.py"),
            "db_worker",
            "--queue-name",
            ",".join(queues),
            "--interval",
            INTERVAL,
            "--no-reload",
            "--no-startup-delay",
            "-v",
            "0",
        ]

    def worker_env(self, log_path: Path) -> dict[str, str]:
        env = super().worker_env(log_path)
        env["DJANGO_SETTINGS_MODULE"] = SETTINGS
        return env

    def count_completed(self) -> int:
        return int(self.scalar(f"SELECT count(*) FROM {self.table} WHERE status = 'SUCCESSFUL'"))

    def count_unfinished(self) -> int:
        return int(self.scalar(f"SELECT count(*) FROM {self.table} WHERE status IN ('READY', 'RUNNING')"))

    def add_finished_rows(self, n: int) -> None:
        self.sql(
            f"""
            INSERT INTO {self.table}
                (id, status, enqueued_at, started_at, finished_at, args_kwargs, priority, task_path,
                 worker_ids, queue_name, backend_name, run_after, return_value, exception_class_path,
                 traceback)
            SELECT gen_random_uuid(), 'SUCCESSFUL', now() - interval '1 hour', now() - interval '1 hour',
                   now() - interval '1 hour',
                   jsonb_build_object('args', '[]'::jsonb, 'kwargs', jsonb_build_object('seq', -1000000 - g)),
                   0, %s, '["w"]'::jsonb, 'bench', 'default', '9999-01-01 00:00:00+00', 'null'::jsonb, '', ''
            FROM generate_series(1, %s) g
            """,
            [self.tasks.noop.module_path, n],
        )
        self.sql(f"VACUUM ANALYZE {self.table}")

    def close(self) -> None:
        from django.db import connections

        connections.close_all()
        super().close()


def make(db_url: str, workdir: Path) -> DjangoTasksDb:
    return DjangoTasksDb(db_url, workdir)
