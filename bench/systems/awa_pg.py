"""awa (the ``awa-pg`` package): Rust runtime, Python handlers; kinds ``noop`` and ``sleep``.

Storage: ``migrate()`` then ``install_queue_storage()`` (the 0.6 queue-storage engine, which
``enqueue_many_copy`` needs). Fastest bulk path: ``AsyncClient.enqueue_many_copy`` (COPY into
queue storage). Worker: ``AsyncClient.start([{"name": q, "max_workers": N}])`` in
``python -m bench.systems.awa_pg worker``; weighted mode passes ``min_workers``/``weight`` per
queue and ``global_max_workers``.

Completed jobs live in compact completion receipts, not one row per job; count_completed adds
the receipts' counts, the terminal done entries and the pruned roll-ups (the exact
``awa.terminal_jobs`` view is too slow to poll).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import awa

from bench import handlerlog
from bench.systems.base import System


@dataclass
class Noop:
    seq: int


@dataclass
class Sleep:
    seq: int
    ms: int


COMPLETED_SQL = """
SELECT coalesce((SELECT sum(completed_count) FROM awa.receipt_completion_batches), 0)
     - (SELECT count(*) FROM awa.receipt_completion_tombstones)
     + (SELECT count(*) FROM awa.done_entries WHERE state = 'completed')
     + coalesce((SELECT sum(pruned_completed_count) FROM awa.queue_terminal_rollups), 0)
"""


def register(client: awa.AsyncClient, queue: str) -> None:
    @client.task(Noop, kind="noop", queue=queue)
    async def noop(job: Any) -> None:
        handlerlog.start(job.args.seq, job.queue)
        handlerlog.end(job.args.seq, job.queue)

    @client.task(Sleep, kind="sleep", queue=queue)
    async def sleep(job: Any) -> None:
        handlerlog.start(job.args.seq, job.queue)
        await asyncio.sleep(job.args.ms / 1000)
        handlerlog.end(job.args.seq, job.queue)


class AwaPg(System):
    name = "awa_pg"
    job_table = "awa.jobs"
    supports_weighted = True
    notes = ["queue-storage engine (install_queue_storage), client pool 10 connections, defaults otherwise"]

    def __init__(self, db_url: str, workdir: Path) -> None:
        super().__init__(db_url, workdir)
        self._client: awa.AsyncClient | None = None

    def client(self) -> awa.AsyncClient:
        if self._client is None:
            self._client = awa.AsyncClient(self.db_url)
        return self._client

    def distributions(self) -> list[str]:
        return ["awa-pg"]

    def setup(self) -> None:
        client = self.client()
        self.run(client.migrate())
        self.run(client.install_queue_storage())

    def single_enqueue(self, n: int, queue: str = "bench") -> None:
        client = self.client()

        async def go() -> None:
            for seq in range(n):
                await client.insert(Noop(seq=seq), kind="noop", queue=queue)

        self.run(go())

    def enqueue_one(self, seq: int, queue: str = "bench") -> None:
        self.run(self.client().insert(Noop(seq=seq), kind="noop", queue=queue))

    def bulk_enqueue(
        self, n: int, *, kind: str = "noop", queue: str = "bench", seq_start: int = 0, ms: int | None = None
    ) -> None:
        if kind == "sleep":
            jobs: list[Any] = [Sleep(seq=seq_start + i, ms=int(ms or 0)) for i in range(n)]
        else:
            jobs = [Noop(seq=seq_start + i) for i in range(n)]
        self.run(self.client().enqueue_many_copy(jobs, kind=kind, queue=queue))

    def worker_command(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "bench.systems.awa_pg",
            "worker",
            "--concurrency",
            str(concurrency),
            "--queues",
            ",".join(queues),
        ]
        if weighted is not None:
            cmd += ["--weighted", json.dumps(weighted)]
        return cmd

    def count_completed(self) -> int:
        return int(self.scalar(COMPLETED_SQL))

    def count_unfinished(self) -> int:
        return int(
            self.scalar(
                "SELECT count(*) FROM awa.jobs WHERE state IN ('scheduled', 'available', 'running', 'retryable')"
            )
        )

    def add_finished_rows(self, n: int) -> None:
        # Finished work lives in awa's rotating receipt partitions, whose layout is internal: the
        # only faithful way to have n finished jobs is to run them. COPY n jobs, drain them with an
        # in-process runtime at high concurrency, wait until all are counted, then VACUUM ANALYZE.
        client = self.client()
        start = -10_000_000 - n

        async def go() -> None:
            for offset in range(0, n, 50_000):
                size = min(50_000, n - offset)
                await client.enqueue_many_copy(
                    [Noop(seq=start + offset + i) for i in range(size)], kind="noop", queue="bench"
                )
            runner = awa.AsyncClient(self.db_url, max_connections=20)
            register(runner, "bench")
            await runner.start([{"name": "bench", "max_workers": 256}])
            try:
                while int(self.scalar(COMPLETED_SQL)) < n:  # noqa: ASYNC110 - polling the database
                    await asyncio.sleep(0.2)
            finally:
                await runner.shutdown(timeout_ms=5000)
                await runner.close()

        self.run(go())
        self.sql("VACUUM ANALYZE")

    def close(self) -> None:
        if self._client is not None:
            self.run(self._client.close())
            self._client = None
        super().close()


def make(db_url: str, workdir: Path) -> AwaPg:
    return AwaPg(db_url, workdir)


def worker_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--queues", default="bench")
    parser.add_argument("--weighted", default=None)
    args = parser.parse_args()
    queues = args.queues.split(",")

    async def go() -> None:
        client = awa.AsyncClient(os.environ["DATABASE_URL"])
        register(client, queues[0])
        if args.weighted:
            weighted = json.loads(args.weighted)
            configs = [
                {"name": q, "min_workers": int(c["min"]), "weight": int(c["weight"])}
                for q, c in sorted(weighted["queues"].items())
            ]
            await client.start(configs, global_max_workers=int(weighted["global_max"]))
        else:
            await client.start([{"name": q, "max_workers": args.concurrency} for q in queues])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await client.shutdown(timeout_ms=5000)
        await client.close()

    asyncio.run(go())


if __name__ == "__main__":
    worker_main()
