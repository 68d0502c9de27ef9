"""The supervisor: owns the event loop's tasks, the stop event, and the shutdown order.

Tasks, each named: one dispatcher per queue, the batched writer, the LISTEN loop, the heartbeat
loop, the maintenance loop (leader only does the work), the snapshot loop and the configuration
re-read loop. A side task that dies is noticed, logged, and stops the worker with an error.

Shutdown order: stop claiming; let in-flight jobs finish within the shutdown timeout; cancel
the handlers still running, and hand back (retryable, due now, guarded by run_lease) only the
attempts whose handler did not return: one that returned, even at the last moment, is written
with its real outcome; flush the writer (bounded); release; remove this worker's snapshot; close
connections. A second signal stops at once (every wait above gives way to it, and a watchdog
ends the process within a second if something still holds it) and the rescue path recovers
whatever was left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator, Permit, release_all
from awa_django.exceptions import ConfigurationError
from awa_django.observability import tracing
from awa_django.observability.joblog import report_outcome
from awa_django.observability.sink import MetricsSink, NoopSink, gauge_reader
from awa_django.registry import Registry
from awa_django.registry import registry as default_registry
from awa_django.sql import CANCEL_CHANNEL, JOBS_CHANNEL, LISTEN_PING_CHANNEL, QUEUES_CHANNEL, statements
from awa_django.worker.capacity import ClusterMember
from awa_django.worker.completer import WRITE_ERRORS, Completer
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.context import ClaimedJob, JobContext
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff, connect, make_pool, retrying
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.executor import Executor
from awa_django.worker.maintenance import Maintenance

logger = logging.getLogger(__name__)

# After a second stop signal the process ends within this many seconds, whatever still holds it
# (a handler that ignores cancellation, a thread, a connection that does not close).
FORCED_EXIT_SECONDS = 0.8
# Cancelled at the shutdown timeout, a handler gets this long to end before its row is handed back.
# (more than the executor's SYNC_CANCEL_GRACE, so a sync handler returning in that grace is kept).
HAND_BACK_GRACE = 1.5


class ListenerStalledError(Exception):
    """The LISTEN connection stopped answering its health check (dead or half-open)."""


LISTEN_LOST: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, ListenerStalledError)


class Worker:
    """One worker process's runtime. ``await Worker(config).run()`` until stopped."""

    def __init__(
        self, config: WorkerConfig, *, registry: Registry | None = None, metrics: MetricsSink | None = None
    ) -> None:
        self.config = config
        self.registry = registry or default_registry
        self.metrics = metrics or NoopSink()
        self.instance_id = uuid.uuid4()
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(timezone.utc)
        if config.capacity_scope == "cluster":
            # The leader's caps decide, per queue; the allocator enforces them (hard-reserved style).
            self.allocator = Allocator(None, config.queues)
        else:
            self.allocator = Allocator(config.global_max_workers, config.queues)
        self.allocator.on_release = self._on_release
        self._wake_scheduled = False
        self.dispatchers: dict[str, Dispatcher] = {}
        self.in_flight: dict[int, tuple[ClaimedJob, JobContext, asyncio.Task[None]]] = {}
        # Sync handlers past their deadline whose thread still runs: the row is written, the slot held.
        self.overrunning: set[int] = set()
        self._owns_process = False  # signal handlers installed: this worker is the process
        self.executor = Executor(self.registry, config.sync_threads)
        self.pool: AsyncConnectionPool = make_pool(config.database_alias, config.pool_size)
        self.completer = Completer(self.pool, hand_over=self)
        self.maintenance = Maintenance(self)
        self.cluster = ClusterMember(self) if config.capacity_scope == "cluster" else None
        self.stopping = False
        self.forced = False
        self.listening = False
        self._stop = asyncio.Event()
        self._forced_event = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ready = asyncio.Event()
        self._reconfigure_now = asyncio.Event()
        self._probe_now = asyncio.Event()
        self._last_refused: str | None = None
        self.failure: BaseException | None = None
        self.metrics.bind(gauge_reader(self))

    # --- control -------------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop (first signal); a second request stops at once."""
        if self.stopping:
            if not self.forced:
                logger.warning("second stop request: stopping at once; running jobs will be rescued")
                self.forced = True
                self._forced_event.set()
                self._stop.set()
                if self._owns_process:
                    self._arm_forced_exit()
            return
        logger.info("stopping: no new claims; in-flight jobs get %.1fs", self.config.shutdown_timeout)
        self.stopping = True
        for dispatcher in self.dispatchers.values():
            dispatcher.wake.set()
        self._stop.set()

    def _arm_forced_exit(self) -> None:
        """End the process shortly even if something ignores the stop (second signal only)."""

        def expire() -> None:
            logger.error("forced stop still not done after %.1fs; exiting the process now", FORCED_EXIT_SECONDS)
            logging.shutdown()
            os._exit(1)

        timer = threading.Timer(FORCED_EXIT_SECONDS, expire)
        timer.daemon = True
        timer.start()

    def request_stop_threadsafe(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.request_stop)

    # --- permits and jobs ------------------------------------------------------------

    def _on_release(self, queue: str) -> None:
        """A permit came back: wake the dispatchers that may take one now (once per loop turn,
        however many permits a batch gives back)."""
        self.wake_waiting()

    def wake_waiting(self) -> None:
        """Wake, soon, the dispatchers the allocator says a free permit would now be granted to."""
        if self._wake_scheduled:
            return
        if self._loop is None:
            self._wake_waiting_now()
            return
        self._wake_scheduled = True
        self._loop.call_soon_threadsafe(self._wake_waiting_now)

    def _wake_waiting_now(self) -> None:
        self._wake_scheduled = False
        for queue in self.allocator.waiting():
            dispatcher = self.dispatchers.get(queue)
            if dispatcher is not None:
                dispatcher.wake.set()

    # --- the door of cluster capacity (awa_django.worker.capacity.CapacityHost) ---------------

    @property
    def instance_key(self) -> str:
        return str(self.instance_id)

    def queue_use(self) -> dict[str, tuple[int, int]]:
        """{queue: (held, demand)}: demand only while the queue has backlog and is not paused."""
        use = {}
        for name, dispatcher in self.dispatchers.items():
            if not self.allocator.serves(name):
                continue
            wants = dispatcher.hungry and not dispatcher.config.paused
            use[name] = (self.allocator.in_flight(name), dispatcher.wanted if wants else 0)
        return use

    def apply_rate_shares(self, rates: Mapping[str, float]) -> None:
        for name, dispatcher in self.dispatchers.items():
            if name in rates:
                dispatcher.set_rate_share(rates[name])

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    def give_back(self, permits: Iterable[Permit]) -> None:
        """Release permits a poll could not use (each release wakes only who may take it)."""
        release_all(permits)

    def dispatch(self, job: ClaimedJob, permit: Permit) -> None:
        context = JobContext(job)
        task = asyncio.create_task(self._run_job(job, context, permit), name=f"awa-job-{job.id}")
        self.in_flight[job.id] = (job, context, task)
        self.metrics.job_started(job.queue, job.kind, job.waited)

    async def _run_job(self, job: ClaimedJob, context: JobContext, permit: Permit) -> None:
        handed_to_writer = False
        try:
            deadline = self.dispatchers[job.queue].config.deadline if job.queue in self.dispatchers else None
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
                stored = await asyncio.shield(written)
            except asyncio.CancelledError:
                if not self.forced:  # the row is still being written: keep the task until it is
                    with contextlib.suppress(asyncio.CancelledError):
                        await written
                raise
            report_outcome(self.metrics, self.registry, job, outcome, ran, stored)
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

    # --- hand-over (the writer passes permits straight to the next jobs) -------------

    def plan_hand_over(self, permits: Sequence[Permit]) -> dict[str, tuple[list[Permit], dict[str, Any]]]:
        if self.stopping or not permits:
            return {}
        by_queue: dict[str, list[Permit]] = {}
        for permit in permits:
            by_queue.setdefault(permit.queue, []).append(permit)
        plan: dict[str, tuple[list[Permit], dict[str, Any]]] = {}
        now = time.monotonic()
        for queue, mine in by_queue.items():
            dispatcher = self.dispatchers.get(queue)
            if dispatcher is None or dispatcher.config.paused or not dispatcher.hungry:
                continue  # an idle or paused queue: nothing to claim; its permits go back
            kept = self.allocator.keepable(queue, mine)
            if dispatcher.bucket is not None and kept:
                kept = kept[: dispatcher.bucket.take(len(kept), now)]
            if kept:
                plan[queue] = (kept, dispatcher.claim_params(len(kept)))
        return plan

    def adopt(self, queue: str, rows: list[tuple[Any, ...]], permits: list[Permit], *, ran_dry: bool = True) -> None:
        dispatcher = self.dispatchers.get(queue)
        for row, permit in zip(rows, permits, strict=False):
            self.dispatch(ClaimedJob(*row), permit)
        unfilled = permits[len(rows) :]
        release_all(unfilled)
        if dispatcher is not None:
            dispatcher.claimed_total += len(rows)
            if unfilled:
                if dispatcher.bucket is not None:
                    dispatcher.bucket.refund(len(unfilled))
                if not ran_dry:  # the claim never ran (its batch was refused): let it claim itself
                    dispatcher.nudge()
                elif not dispatcher.polling:  # the queue ran dry; a NOTIFY or the probe wakes it again
                    dispatcher.hungry = False
                    dispatcher.stand_down()

    # --- the run ---------------------------------------------------------------------

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._install_signals()
        await retrying("opening the connection pool", self._open_pool)
        names = list(self.config.queues)
        shown = ",".join(names[:20]) + (f",… ({len(names)} queues)" if len(names) > 20 else "")
        logger.info(
            "worker started instance=%s mode=%s capacity_scope=%s global_max_workers=%s queues=%s pool_size=%s",
            self.instance_id,
            self.allocator.mode,
            self.config.capacity_scope,
            self.config.global_max_workers,
            shown,
            self.config.pool_size,
        )
        try:
            for queue in self.config.queues.values():
                self._start_dispatcher(queue)
            self._spawn("awa-completer", self.completer.run())
            self._spawn("awa-listener", self._listen())
            self._spawn("awa-heartbeat", self._heartbeat())
            self._spawn("awa-maintenance", self.maintenance.run())
            self._spawn("awa-backlog", self._backlog_probe())
            if self.cluster is not None:
                self._spawn("awa-capacity", self.cluster.run())
            self._spawn("awa-snapshot", self._snapshots())
            self._spawn("awa-reconfigure", self._reconfigure_loop())
            self.ready.set()
            await self._stop.wait()
            if not self.forced:
                await self._drain()
        finally:
            await self._close()
        if self.failure is not None:
            raise self.failure

    async def _open_pool(self) -> None:
        await self.pool.open(wait=True, timeout=10)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks[name] = task
        task.add_done_callback(self._side_task_done)
        return task

    def _side_task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or self.stopping:
            return
        exc = task.exception()
        if exc is None:  # a loop that ended on purpose (e.g. LISTEN turned off) said so itself
            return
        logger.error("side task %s died: %r; stopping the worker", task.get_name(), exc, exc_info=exc)
        self.failure = exc or RuntimeError(f"side task {task.get_name()} ended unexpectedly")
        self.request_stop()

    def _start_dispatcher(self, queue: QueueConfig) -> None:
        dispatcher = Dispatcher(self, queue)
        self.dispatchers[queue.name] = dispatcher
        self._spawn(f"awa-dispatch-{queue.name}", dispatcher.run())

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.request_stop)
                self._owns_process = True

    async def _drain(self) -> None:
        """Stop claiming, then wait for in-flight jobs within the timeout; a second signal cuts
        every wait short (the rescue path then recovers what was left running)."""
        dispatcher_tasks = [t for n, t in self._tasks.items() if n.startswith("awa-dispatch-")]
        if not await self._unless_forced(asyncio.gather(*dispatcher_tasks, return_exceptions=True)):
            return
        if self.in_flight:
            logger.info(
                "waiting for %d in-flight job(s), at most %.1fs", len(self.in_flight), self.config.shutdown_timeout
            )
        # Re-read in_flight each round: a batch write in progress when the stop came may still
        # hand its permits to newly claimed jobs, and those must be waited for (or handed back) too.
        deadline = time.monotonic() + self.config.shutdown_timeout
        while True:
            jobs = [task for _, _, task in self.in_flight.values() if not task.done()]
            left = deadline - time.monotonic()
            if not jobs or left <= 0:
                break
            if not await self._unless_forced(asyncio.wait(jobs, timeout=left)):
                return
        if any(not task.done() for _, _, task in self.in_flight.values()):
            await self._hand_back()
        # The last results: bounded too, a database that stays away must not hold the stop forever.
        flush = max(self.config.shutdown_timeout, 5.0)
        try:
            await self._unless_forced(asyncio.wait_for(self.completer.wait_idle(), flush))
        except TimeoutError:
            logger.error(
                "could not write %d finished attempt(s) within %.1fs of stopping; their rows stay running "
                "until the rescue retries them",
                self.completer.pending,
                flush,
            )

    async def _unless_forced(self, awaitable: Awaitable[Any]) -> bool:
        """Await ``awaitable`` unless the stop is escalated first; True if it finished."""
        work = asyncio.ensure_future(awaitable)
        forced = asyncio.ensure_future(self._forced_event.wait())
        try:
            await asyncio.wait({work, forced}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            forced.cancel()
        if work.done():
            return True
        work.cancel()
        return False

    async def _hand_back(self) -> None:
        """Cancel the handlers still running, then hand back the attempts that did not return.

        An attempt whose handler has returned (``finishing``) is never handed back: its outcome is
        written by the writer. The handlers are cancelled first and given a moment to end, so one
        that returns meanwhile (an async handler that finishes on cancellation, a sync handler
        whose thread returned as the stop came) is written with its real outcome too.
        """
        left = [
            (job, context, task)
            for job, context, task in self.in_flight.values()
            if not task.done() and not context.finishing
        ]
        if not left:
            return
        for _, context, task in left:
            context.cancel()
            task.cancel()
        if not await self._unless_forced(asyncio.wait([task for _, _, task in left], timeout=HAND_BACK_GRACE)):
            return
        left = [(job, context, task) for job, context, task in left if not context.finishing]
        if not left:
            return
        logger.warning(
            "shutdown timeout (%.1fs) passed with %d job(s) running; handing them back as retryable",
            self.config.shutdown_timeout,
            len(left),
        )
        params = {
            "ids": [job.id for job, _, _ in left],
            "leases": [job.run_lease for job, _, _ in left],
            "reason": f"worker stopped: the job was still running after the {self.config.shutdown_timeout}s "
            "shutdown timeout; handed back to run again",
        }

        async def write() -> None:
            async with self.pool.connection() as conn:
                await conn.execute(statements["release_jobs"], params)

        try:
            await self._unless_forced(retrying("release_jobs", write, attempts=5))
        except WRITE_ERRORS as exc:
            logger.error("could not hand back %d job(s): %r; the rescue path will recover them", len(left), exc)

    async def _close(self) -> None:
        self.stopping = True
        if self.forced:
            for _, context, task in list(self.in_flight.values()):
                context.cancel()
                task.cancel()
        for task in self._tasks.values():
            task.cancel()
        # Each step bounded: a task that ignores cancellation or a connection that hangs must not
        # hold the stop (after a second signal, the watchdog ends the process regardless).
        grace = 0.2 if self.forced else 5.0
        _, stuck = await asyncio.wait(self._tasks.values(), timeout=grace) if self._tasks else (set(), set())
        if stuck:
            logger.error("side task(s) did not stop within %.1fs: %s", grace, ",".join(t.get_name() for t in stuck))
        if not self.forced:
            if self.cluster is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.cluster.leave(), 2)
            with contextlib.suppress(*WRITE_ERRORS, TimeoutError):
                async with asyncio.timeout(2), self.pool.connection(timeout=2) as conn:
                    await conn.execute(statements["delete_worker_instance"], {"instance_id": self.instance_id})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.maintenance.close(), grace)
        await self.pool.close(timeout=grace)
        self.executor.shutdown()
        logger.info(
            "worker stopped instance=%s written=%d lost=%d",
            self.instance_id,
            self.completer.written,
            self.completer.lost,
        )

    # --- side loops ------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    def listen_check_interval(self) -> float:
        """How often the LISTEN connection proves it works (a self-NOTIFY round trip); a check
        not answered within one interval means the connection is dead or half-open."""
        return max(0.2, min(self.config.heartbeat_interval, 5.0))

    async def _listen(self) -> None:
        """LISTEN for wake-ups; on any connection loss reconnect with backoff and wake everyone.

        A connection can die without a word (a half-open TCP connection, a stopped backend): then
        no error ever comes, only silence. So the connection NOTIFYs itself every check interval and
        must hear the echo before the next check; ``listening`` is true only while it does."""
        if not self.config.listen:
            logger.warning(
                "LISTEN is off (AWA['LISTEN']=False, or AWA['POOLER']='transaction' without "
                "AWA['LISTEN_DATABASE_URL']): probing for jobs every %.2fs",
                self.config.poll_interval,
            )
            return
        backoff = Backoff()
        while not self.stopping:
            try:
                conn = await connect(self.config.database_alias, purpose="listen")
            except TRANSIENT_ERRORS as exc:
                delay = backoff.next()
                logger.warning("LISTEN connection failed, retrying in %.2fs error=%r", delay, exc)
                await self._sleep(delay)
                continue
            try:
                async with conn:
                    try:
                        for channel in (JOBS_CHANNEL, QUEUES_CHANNEL, CANCEL_CHANNEL, LISTEN_PING_CHANNEL):
                            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    except psycopg.errors.FeatureNotSupported as exc:
                        logger.warning(
                            "LISTEN is not available (%s): polling every %.2fs",
                            exc,
                            self.config.poll_interval,
                        )
                        return
                    self.listening = True
                    backoff.reset()
                    self._probe_now.set()  # we may have missed notifications: look at every queue
                    await self._receive(conn)
            except LISTEN_LOST as exc:
                self.listening = False
                delay = backoff.next()
                logger.warning("LISTEN connection lost, reconnecting in %.2fs error=%r", delay, exc)
                await self._sleep(delay)
            finally:
                self.listening = False

    async def _receive(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Handle notifications; every interval, check the previous self-NOTIFY came back and send
        the next one. Raises ListenerStalledError when the connection stopped answering."""
        interval = self.listen_check_interval()
        waiting_for: str | None = None
        while not self.stopping:
            async for notify in conn.notifies(timeout=interval):
                if notify.channel == LISTEN_PING_CHANNEL:
                    if notify.payload == waiting_for:
                        waiting_for = None
                    continue
                self._on_notify(notify.channel, notify.payload)
            if waiting_for is not None:
                raise ListenerStalledError(f"the LISTEN connection's self-NOTIFY did not come back within {interval}s")
            waiting_for = uuid.uuid4().hex
            ping = {"channel": LISTEN_PING_CHANNEL, "token": waiting_for}
            try:
                await asyncio.wait_for(conn.execute(statements["notify_listener_ping"], ping), interval)
            except TimeoutError:
                raise ListenerStalledError(
                    f"the LISTEN connection did not answer its health check within {interval}s"
                ) from None

    def _on_notify(self, channel: str, payload: str) -> None:
        logger.debug("notified channel=%s payload=%s", channel, payload)
        if channel == JOBS_CHANNEL:
            dispatcher = self.dispatchers.get(payload)
            if dispatcher is not None:
                dispatcher.nudge()
        elif channel == QUEUES_CHANNEL:
            self._reconfigure_now.set()
        elif channel == CANCEL_CHANNEL:
            with contextlib.suppress(ValueError):
                entry = self.in_flight.get(int(payload))
                if entry is not None:
                    logger.info("job cancelled while running job_id=%s; telling its handler", payload)
                    entry[1].cancel()

    async def _backlog_probe(self) -> None:
        """The backstop to NOTIFY, one query per poll interval for every queue together: nudge
        the idle dispatchers whose queue has due jobs (a missed or absent NOTIFY, a promoted
        scheduled job), and stand down those believed hungry whose queue has none (another
        worker took the jobs a NOTIFY announced), so neither waits nor contends by mistake. The
        first probe runs at once: it is how the dispatchers learn of jobs waiting at start."""
        while not self.stopping:
            nudges = {name: d.nudges for name, d in self.dispatchers.items() if not d.config.paused and not d.polling}
            candidates = list(nudges)
            if not candidates:
                await self._sleep(self.config.poll_interval)
                continue
            try:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(statements["find_ready_queues"], {"queues": candidates})
                    ready = {row[0] for row in await cursor.fetchall()}
            except TRANSIENT_ERRORS as exc:
                logger.warning("backlog probe failed: %r; retrying next interval", exc)
                await self._sleep(self.config.poll_interval)
                continue
            for name in candidates:
                dispatcher = self.dispatchers.get(name)
                if dispatcher is None or dispatcher.polling or dispatcher.nudges != nudges[name]:
                    continue  # it looked, or was told of new jobs, after the query: it knows better
                if name in ready:
                    if not dispatcher.hungry:
                        logger.debug("backlog probe wakes queue=%s", name)
                        dispatcher.nudge()
                elif dispatcher.hungry and self.allocator.serves(name) and self.allocator.in_flight(name) == 0:
                    dispatcher.hungry = False
                    dispatcher.stand_down()
            self.wake_waiting()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._probe_now.wait(), self.config.poll_interval)
            self._probe_now.clear()

    async def _heartbeat(self) -> None:
        """Batched heartbeats (with progress) for every in-flight attempt."""
        while not self.stopping:
            await self._sleep(self.config.heartbeat_interval)
            # Attempts already finishing are being written; in id order, like the completer's
            # batches, so two batch updates of the same rows cannot deadlock.
            entries = sorted(
                (entry for entry in self.in_flight.values() if not entry[1].finishing), key=lambda e: e[0].id
            )
            if not entries:
                continue
            ids = [job.id for job, _, _ in entries]
            leases = [job.run_lease for job, _, _ in entries]
            progress = [c.progress_json for _, c, _ in entries]

            async def beat(
                ids: list[int] = ids, leases: list[int] = leases, progress: list[Any] = progress
            ) -> set[int]:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(
                        statements["heartbeat_jobs"], {"ids": ids, "leases": leases, "progress": progress}
                    )
                    return {row[0] for row in await cursor.fetchall()}

            try:
                alive = await beat()
            except TRANSIENT_ERRORS as exc:
                logger.warning("heartbeat failed for %d job(s): %r; retrying next interval", len(ids), exc)
                continue
            except WRITE_ERRORS as exc:
                # Progress is checked when it is set, so this should not happen; if it does, the
                # attempts must still prove they are alive: beat again without the progress.
                logger.error("heartbeat refused for %d job(s) error=%r; beating again without progress", len(ids), exc)
                try:
                    alive = await beat(progress=[None] * len(ids))
                except WRITE_ERRORS as again:
                    logger.error("heartbeat failed for %d job(s): %r; retrying next interval", len(ids), again)
                    continue
            for job, context, _ in entries:
                if job.id not in alive and not context.finishing:
                    logger.warning(
                        "job no longer held by this worker job_id=%s run_lease=%s (rescued or cancelled); "
                        "telling its handler to stop",
                        job.id,
                        job.run_lease,
                    )
                    context.cancel()

    async def _snapshots(self) -> None:
        interval = min(self.config.heartbeat_interval, 5.0)
        while not self.stopping:
            try:
                await self.write_snapshot()
            except WRITE_ERRORS as exc:
                logger.warning("snapshot write failed: %r", exc)
            await self._sleep(interval)

    def health(self, available_rows: dict[str, int] | None = None) -> dict[str, Any]:
        """Per queue: mode, capacity (HardReserved / Weighted), in-flight and available permits."""
        queues: dict[str, Any] = {}
        snapshot = self.allocator.snapshot()
        for name, entry in snapshot.items():
            capacity = self.allocator.capacity(name)
            queues[name] = {
                **entry,
                "capacity": {"type": type(capacity).__name__, **capacity.__dict__},
                "paused": self.dispatchers[name].config.paused if name in self.dispatchers else False,
                "jobs_available": (available_rows or {}).get(name),
            }
        return queues

    async def write_snapshot(self) -> None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(statements["count_available_jobs"], {"queues": list(self.dispatchers)})
            available_rows = {row[0]: row[1] for row in await cursor.fetchall()}
            flags = {
                "listening": self.listening,
                "leader": self.maintenance.is_leader,
                "stopping": self.stopping,
                "in_flight": len(self.in_flight),
                "sync_running": self.executor.sync_running,
                "capacity_scope": self.config.capacity_scope,
                # sync handlers past their deadline whose threads still run, each holding its slot
                "sync_overrunning": len(self.overrunning),
            }
            if self.cluster is not None:
                flags["cluster_caps"] = self.cluster.caps
                flags["cluster_leased"] = self.cluster.leased
            await conn.execute(
                statements["upsert_worker_instance"],
                {
                    "instance_id": self.instance_id,
                    "hostname": self.hostname,
                    "pid": self.pid,
                    "started_at": self.started_at,
                    "mode": self.allocator.mode,
                    "global_max_workers": self.config.global_max_workers,
                    "queues": json.dumps(self.health(available_rows)),
                    "flags": json.dumps(flags),
                },
            )

    # --- live reconfiguration ------------------------------------------------------------

    async def _reconfigure_loop(self) -> None:
        """Re-read Queue rows on NOTIFY (a save in the admin) and every few seconds as a fallback."""
        while not self.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reconfigure_now.wait(), self.config.reconfigure_interval)
            self._reconfigure_now.clear()
            if self.stopping:
                return
            try:
                await self.reload_queues()
            except TRANSIENT_ERRORS as exc:
                logger.warning("could not re-read queue settings: %r", exc)

    async def reload_queues(self) -> bool:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(statements["read_queues"])
            names = [d.name for d in cursor.description or []]
            rows = {r[0]: QueueConfig.from_row(dict(zip(names, r, strict=True))) for r in await cursor.fetchall()}
        return self.apply_queue_rows(rows)

    def apply_queue_rows(self, rows: dict[str, QueueConfig]) -> bool:
        """Apply new Queue settings if they pass the rules; otherwise keep the last good ones."""
        current = self.config.queues
        names = list(current) if self.config.fixed_queues else list(dict.fromkeys([*current, *rows]))
        wanted = {name: rows.get(name, current.get(name) or QueueConfig(name)) for name in names}
        if wanted == current:
            return False
        try:
            self.allocator.reconfigure(self.config.global_max_workers, wanted)
        except ConfigurationError as exc:
            if self._last_refused != str(exc):
                logger.error("refusing new queue settings, keeping the last good ones: %s", exc)
                self._last_refused = str(exc)
            return False
        self._last_refused = None
        self.config = self.config.with_queues(wanted)
        for name, queue in wanted.items():
            if name in self.dispatchers:
                if self.dispatchers[name].config != queue:
                    logger.info("queue settings changed queue=%s %s", name, queue)
                    self.dispatchers[name].apply(queue)
            elif not self.stopping:
                logger.info("serving new queue queue=%s", name)
                self._start_dispatcher(queue)
                self.dispatchers[name].nudge()
        self.wake_waiting()  # new weights or floors may let a waiting queue take a permit now
        return True

    # --- helpers for maintenance ------------------------------------------------------------

    def retention(self) -> dict[str, timedelta]:
        return {
            "completed": timedelta(seconds=self.config.completed_retention),
            "failed": timedelta(seconds=self.config.failed_retention),
            "cancelled": timedelta(seconds=self.config.failed_retention),
        }
