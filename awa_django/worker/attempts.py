"""Attempts: one task per claimed job, from its permit to its written outcome.

``start`` is where a claimed row goes (from a runner's claim or the writer's hand-over): it
creates the attempt's task and records it in ``in_flight``. The task runs the handler
(``executor``), hands the outcome and the permit to the batched writer (``completer``), and ends
once the row's final state is written: a row marked running always holds a slot. An atomic
handler's completion is written by its own transaction before the executor returns
(``Outcome.settled``): the writer then only answers it and passes its permit on. A sync handler
past its deadline keeps its slot (``overrunning``) until its thread returns, though its row is
already written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from awa_django.concurrency import Permit
from awa_django.context import ClaimedJob, InFlight, JobContext
from awa_django.observability import tracing
from awa_django.observability.joblog import report_outcome
from awa_django.observability.sink import MetricsSink
from awa_django.registry import Registry
from awa_django.worker.completer import Completer
from awa_django.worker.executor import Executor
from awa_django.worker.stop import Stop

logger = logging.getLogger(__name__)


class Attempts:
    def __init__(
        self, executor: Executor, completer: Completer, *, registry: Registry, metrics: MetricsSink, stop: Stop
    ) -> None:
        self.executor = executor
        self.completer = completer
        self.registry = registry
        self.metrics = metrics
        self.stop = stop
        self.in_flight: dict[int, InFlight] = {}
        # Sync handlers past their deadline whose thread still runs: the row is written, the slot held.
        self.overrunning: set[int] = set()

    def start(self, job: ClaimedJob, permit: Permit, deadline: float | None) -> None:
        """Run a claimed job on its permit, within ``deadline`` seconds (None: no deadline)."""
        context = JobContext(job)
        # No per-job task name (8 % of the per-job Python in a drain): in_flight maps ids to tasks.
        task = asyncio.create_task(self._run_job(job, context, permit, deadline))
        self.in_flight[job.id] = InFlight(job, context, task)
        self.metrics.job_started(job.queue, job.kind, job.waited)

    async def _run_job(self, job: ClaimedJob, context: JobContext, permit: Permit, deadline: float | None) -> None:
        handed_to_writer = False
        try:
            if job.timeout is not None:  # the kind's own timeout overrides the queue's deadline
                deadline = job.timeout
            started = time.monotonic()
            with tracing.attempt_span(job) as span:
                outcome = await self.executor.execute(job, context, deadline)
                tracing.end_attempt(span, outcome)
            ran = time.monotonic() - started
            context.finishing = True
            # The writer takes the permit over: it frees the slot once the row is written, or
            # passes it to the queue's next job in the same round trip. Not so for a sync handler
            # past its deadline: its row is written now, but its thread still runs, and keeps the
            # slot until it returns, so no more handlers execute than there are permits.
            thread = context.running_thread
            written = self.completer.submit(job, outcome, context.progress_json, permit if thread is None else None)
            handed_to_writer = thread is None
            try:
                stored = await written
            except asyncio.CancelledError:
                # Cancelled while the row is still being written (awaiting the future cancelled it
                # too): keep the task until the write is answered, unless the stop is forced.
                if not self.stop.forced and written.cancelled():
                    with contextlib.suppress(asyncio.CancelledError):
                        await self.completer.until_written(job.id)
                raise
            refusal = "lost" if stored else self.completer.refusal(job.id)
            report_outcome(self.metrics, self.registry, job, outcome, ran, stored, refusal)
            if thread is not None:
                self.in_flight.pop(job.id, None)  # finished as far as the row goes: not drained
                self.overrunning.add(job.id)
                logger.warning(
                    "sync handler past its deadline still running job_id=%s kind=%s deadline=%s; "
                    "its slot stays taken until its thread returns",
                    job.id,
                    job.kind,
                    deadline,
                )
                await asyncio.wait({thread})
                logger.info("overrunning sync handler returned job_id=%s kind=%s; slot freed", job.id, job.kind)
        finally:
            self.in_flight.pop(job.id, None)
            self.overrunning.discard(job.id)
            if not handed_to_writer:
                permit.release()
