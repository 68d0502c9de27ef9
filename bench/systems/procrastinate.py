"""procrastinate: psycopg 3 async connector; tasks ``noop`` and ``sleep``.

Fastest bulk path: ``Task.batch_defer_async(*kwargs)`` (one INSERT through
procrastinate_defer_jobs_v1 for the whole batch). Worker: ``App.run_worker_async(queues=...,
concurrency=N)`` in ``python -m bench.systems.procrastinate worker``, as the `procrastinate
worker --concurrency N` command does.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import procrastinate

from bench import handlerlog
from bench.systems.base import System

# The worker's connection pool: psycopg_pool's default is 4 connections; 10 matches awa-pg's
# default pool, so 32 concurrent jobs are not starved of connections to finish on.
POOL_MAX = 10


def make_app(db_url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db_url, min_size=1, max_size=POOL_MAX))

    @app.task(name="noop", queue="bench", pass_context=True)
    async def noop(context: Any, seq: int) -> None:
        queue = context.job.queue
        handlerlog.start(seq, queue)
        handlerlog.end(seq, queue)

    @app.task(name="sleep", queue="bench", pass_context=True)
    async def sleep(context: Any, seq: int, ms: int) -> None:
        queue = context.job.queue
        handlerlog.start(seq, queue)
        await asyncio.sleep(ms / 1000)
        handlerlog.end(seq, queue)

    return app


class Procrastinate(System):
    name = "procrastinate"
    job_table = "procrastinate_jobs"
    weighted_reason = "no weighted per-queue concurrency (one concurrency per worker)"
    notes = [f"worker pool max_size={POOL_MAX}; LISTEN/NOTIFY on; defaults otherwise"]

    def __init__(self, db_url: str, workdir: Path) -> None:
        super().__init__(db_url, workdir)
        self.app = make_app(db_url)
        self._opened = False

    def _open(self) -> None:
        if not self._opened:
            self.run(self.app.open_async())
            self._opened = True

    def distributions(self) -> list[str]:
        return ["procrastinate", "psycopg"]

    def setup(self) -> None:
        self._open()
        self.run(self.app.schema_manager.apply_schema_async())

    def single_enqueue(self, n: int, queue: str = "bench") -> None:
        self._open()
        task = self.app.tasks["noop"].configure(queue=queue)

        async def go() -> None:
            for seq in range(n):
                await task.defer_async(seq=seq)

        self.run(go())

    def enqueue_one(self, seq: int, queue: str = "bench") -> None:
        self._open()
        self.run(self.app.tasks["noop"].configure(queue=queue).defer_async(seq=seq))

    def bulk_enqueue(
        self, n: int, *, kind: str = "noop", queue: str = "bench", seq_start: int = 0, ms: int | None = None
    ) -> None:
        self._open()
        extra = {} if ms is None else {"ms": ms}
        deferrer = self.app.tasks[kind].configure(queue=queue)
        self.run(deferrer.batch_defer_async(*({"seq": seq_start + i, **extra} for i in range(n))))

    def worker_command(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> list[str]:
        return [
            self.python,
            "-m",
            "bench.systems.procrastinate",
            "worker",
            "--concurrency",
            str(concurrency),
            "--queues",
            ",".join(queues),
        ]

    def count_completed(self) -> int:
        return int(self.scalar("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"))

    def count_unfinished(self) -> int:
        return int(self.scalar("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"))

    def add_finished_rows(self, n: int) -> None:
        self.sql(
            """
            INSERT INTO procrastinate_jobs (queue_name, task_name, priority, args, status, attempts)
            SELECT 'bench', 'noop', 0, jsonb_build_object('seq', -1000000 - g), 'succeeded', 1
            FROM generate_series(1, %s) g
            """,
            [n],
        )
        self.sql("VACUUM ANALYZE procrastinate_jobs")

    def close(self) -> None:
        if self._opened:
            self.run(self.app.close_async())
            self._opened = False
        super().close()


def make(db_url: str, workdir: Path) -> Procrastinate:
    return Procrastinate(db_url, workdir)


def worker_main() -> None:
    import os

    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--queues", default="bench")
    args = parser.parse_args()
    app = make_app(os.environ["DATABASE_URL"])

    async def go() -> None:
        async with app.open_async():
            await app.run_worker_async(queues=args.queues.split(","), concurrency=args.concurrency)

    asyncio.run(go())


if __name__ == "__main__":
    worker_main()
