"""Operators' requests to this worker, made in the admin and read from ``awa_worker_request``.

No loop of its own: the settings re-read tick (``reconfigure``) calls ``read`` before it applies
the Queue rows and ``acknowledge`` after, so a request is acted on within one
``reconfigure_interval`` (sooner: the admin NOTIFYs the queues channel when it asks).

- **drain**: the same stop as SIGTERM (``request_stop``): no new claims, in-flight jobs finish
  or are handed back under the shutdown rules, exit 0. Acknowledged before the stop begins.
- **hold** a queue: from then on the queue is served as if paused in this worker only, and in
  weighted mode its ``min_workers`` floor goes back to the overflow pool (``held_view``; the
  reconfigure path applies it, as for an edited Queue row). Acknowledged only once no claim of
  the queue is under way here, so every attempt this worker starts after ``acknowledged_at`` is
  of another queue: a claim started before the hold may still be answering.
- **resume**: the queue is claimed again with its own settings.

Each request acted on is logged once at INFO, naming the request and who asked. A request this
worker cannot act on (a queue it does not serve, a resume of a queue not held) is acknowledged
with an answer saying so; it changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

from psycopg.rows import dict_row

from awa_django.sql import statements
from awa_django.worker.config import QueueConfig
from awa_django.worker.runner import QueueRunner
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)


def held_view(queue: QueueConfig) -> QueueConfig:
    """A held queue as this worker serves it: paused, its floor given back to the pool."""
    return replace(queue, paused=True, min_workers=0)


def with_holds(queues: Mapping[str, QueueConfig], held: frozenset[str]) -> dict[str, QueueConfig]:
    return {name: held_view(queue) if name in held else queue for name, queue in queues.items()}


@dataclass(frozen=True, slots=True)
class _Answer:
    request_id: int
    answer: str
    waits_for: str | None = None  # a held queue: acknowledged once no claim of it is under way


class Control:
    def __init__(self, runtime: Runtime, on_drain: Callable[[], Awaitable[None]]) -> None:
        self.runtime = runtime
        self.on_drain = on_drain  # the supervisor's graceful stop (SIGTERM's)
        self.held: frozenset[str] = frozenset()
        self.draining = False
        self._answers: list[_Answer] = []
        self._seen: set[int] = set()  # read, not yet acknowledged

    async def read(self) -> None:
        """Take this worker's new pending requests; holds and resumes change ``held`` at once."""
        async with self.runtime.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["read_worker_requests"], {"instance_id": self.runtime.identity.instance_id})
            rows = await cursor.fetchall()
        for row in rows:
            if row["id"] in self._seen:
                continue
            self._seen.add(row["id"])
            self._answers.append(self._act(row["id"], row["action"], row["queue"], row["requested_by"]))

    def _act(self, request_id: int, action: str, queue: str, requested_by: str) -> _Answer:
        who = requested_by or "unknown"
        served = self.runtime.runners
        if action == "drain":
            self.draining = True
            answer = f"draining: no new claims; in-flight jobs get {self.runtime.config.shutdown_timeout:g}s"
        elif action in ("hold", "resume") and queue not in served:
            answer = f"not done: this worker does not serve queue {queue!r}"
        elif action == "hold":
            if queue in self.held:
                return self._said(request_id, action, queue, who, f"queue {queue!r} was already held")
            self.held = self.held | {queue}
            answer = f"holding queue {queue!r}: no new claims of it here"
            return self._said(request_id, action, queue, who, answer, waits_for=queue)
        elif action == "resume":
            if queue not in self.held:
                return self._said(request_id, action, queue, who, f"queue {queue!r} was not held")
            self.held = self.held - {queue}
            answer = f"claiming queue {queue!r} again"
        else:
            answer = f"not done: unknown request {action!r}"
        return self._said(request_id, action, queue, who, answer)

    @staticmethod
    def _said(request_id: int, action: str, queue: str, who: str, answer: str, waits_for: str | None = None) -> _Answer:
        logger.info(
            "operator request id=%s action=%s queue=%s requested_by=%s: %s",
            request_id,
            action,
            queue or "-",
            who,
            answer,
        )
        return _Answer(request_id, answer, waits_for)

    async def acknowledge(self) -> None:
        """Write the answers that are due (a hold's once its queue is paused here and no claim of
        it is under way: a hold the settings path refused stays pending, and the refusal is
        logged); then, if a drain was asked, stop as SIGTERM does."""
        runners = self.runtime.runners
        due = [a for a in self._answers if a.waits_for is None or _held(runners.get(a.waits_for))]
        if due:
            async with self.runtime.pool.connection() as conn:
                await conn.execute(
                    statements["acknowledge_worker_requests"],
                    {"ids": [a.request_id for a in due], "answers": [a.answer for a in due]},
                )
            self._answers = [a for a in self._answers if a not in due]
            self._seen -= {a.request_id for a in due}
        if self.draining and not self.runtime.stop.stopping:
            await self.on_drain()


def _held(runner: QueueRunner | None) -> bool:
    """The queue is paused here and no claim of it is under way."""
    return runner is not None and runner.config.paused and not runner.claiming
