"""pgqueuer: asyncpg driver (its documented default); entrypoints ``noop`` and ``sleep``.

Fastest bulk path: ``Queries.enqueue`` with lists (one INSERT ... SELECT FROM UNNEST for the
whole batch). Worker: a factory run through ``pgqueuer.run`` (what ``pgq run`` does) with
``batch_size=10`` (its default) and ``max_concurrent_tasks=N``, the per-worker cap on picked
jobs. pgqueuer has entrypoints, not queues: the queue name travels in the payload. A finished
job is deleted from ``pgqueuer`` and logged in ``pgqueuer_log`` (status 'successful'), which is
what count_completed counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pgqueuer
from pgqueuer import Job, PgQueuer, Queries
from pgqueuer.db import AsyncpgDriver

from bench import handlerlog
from bench.systems.base import System

BATCH_SIZE = 10  # pgqueuer's default dequeue batch


def _payload(seq: int, queue: str, ms: int | None = None) -> bytes:
    data: dict[str, Any] = {"seq": seq, "q": queue}
    if ms is not None:
        data["ms"] = ms
    return json.dumps(data).encode()


class PgQueuerSystem(System):
    name = "pgqueuer"
    job_table = "pgqueuer"
    weighted_reason = "no weighted queues (per-entrypoint concurrency_limit only)"
    notes = [f"asyncpg driver, batch_size={BATCH_SIZE}, max_concurrent_tasks=concurrency, durable tables"]

    def __init__(self, db_url: str, workdir: Path) -> None:
        super().__init__(db_url, workdir)
        self._queries: Queries | None = None
        self._pg: Any = None

    def queries(self) -> Queries:
        if self._queries is None:
            self._pg = self.run(asyncpg.connect(self.db_url))
            self._queries = Queries(AsyncpgDriver(self._pg))
        return self._queries

    def distributions(self) -> list[str]:
        return ["pgqueuer", "asyncpg"]

    def setup(self) -> None:
        self.run(self.queries().install())

    def single_enqueue(self, n: int, queue: str = "bench") -> None:
        q = self.queries()

        async def go() -> None:
            for seq in range(n):
                await q.enqueue("noop", _payload(seq, queue))

        self.run(go())

    def enqueue_one(self, seq: int, queue: str = "bench") -> None:
        self.run(self.queries().enqueue("noop", _payload(seq, queue)))

    def bulk_enqueue(
        self, n: int, *, kind: str = "noop", queue: str = "bench", seq_start: int = 0, ms: int | None = None
    ) -> None:
        payloads = [_payload(seq_start + i, queue, ms) for i in range(n)]
        self.run(self.queries().enqueue([kind] * n, payloads, [0] * n))

    def worker_command(self, concurrency: int, queues: Sequence[str], weighted: dict[str, Any] | None) -> list[str]:
        return [self.python, "-m", "bench.systems.pgqueuer", "worker", "--concurrency", str(concurrency)]

    def count_completed(self) -> int:
        return int(self.scalar("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"))

    def count_unfinished(self) -> int:
        return int(self.scalar("SELECT count(*) FROM pgqueuer WHERE status IN ('queued', 'picked')"))

    def add_finished_rows(self, n: int) -> None:
        # A finished job leaves no row in the queue table, and two rows in the log ('queued' at
        # enqueue, 'successful' at completion), already folded into the statistics.
        self.sql(
            """
            INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, aggregated)
            SELECT 1000000000 + g, s.status::pgqueuer_status, 0, 'noop', true
            FROM generate_series(1, %s) g, (VALUES ('queued'), ('successful')) s(status)
            """,
            [n],
        )
        self.sql("VACUUM ANALYZE pgqueuer_log")
        self.sql("VACUUM ANALYZE pgqueuer")

    def close(self) -> None:
        if self._pg is not None:
            self.run(self._pg.close())
            self._pg = None
        super().close()


def make(db_url: str, workdir: Path) -> PgQueuerSystem:
    return PgQueuerSystem(db_url, workdir)


@asynccontextmanager
async def factory() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["DATABASE_URL"])
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        data = json.loads(job.payload or b"{}")
        handlerlog.start(data["seq"], data.get("q"))
        handlerlog.end(data["seq"], data.get("q"))

    @pgq.entrypoint("sleep")
    async def sleep(job: Job) -> None:
        data = json.loads(job.payload or b"{}")
        handlerlog.start(data["seq"], data.get("q"))
        await asyncio.sleep(data["ms"] / 1000)
        handlerlog.end(data["seq"], data.get("q"))

    try:
        yield pgq
    finally:
        await connection.close()


def worker_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("worker")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(pgqueuer.run(factory, batch_size=BATCH_SIZE, max_concurrent_tasks=args.concurrency))


if __name__ == "__main__":
    worker_main()
