"""The supervisor: owns the event loop's tasks, the stop event, and the shutdown order.

Tasks, each named: one dispatcher per queue (``dispatcher``), one per running attempt
(``attempts``), the batched writer (``completer``), the LISTEN loop and the backlog probe
(``listener``), the heartbeat loop (``heartbeat``), the maintenance loop (``maintenance``; the
leader only does the work), in capacity scope "cluster" the capacity loop (``capacity``), the
snapshot loop (``health``) and the configuration re-read loop (``reconfigure``). Each of those
modules meets the ``Worker`` through a Protocol of its own; the supervisor only starts, watches
and stops them. A side task that dies is noticed, logged, and stops the worker with an error.

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
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator, Permit, release_all
from awa_django.observability.sink import MetricsSink, NoopSink, gauge_reader
from awa_django.registry import Registry
from awa_django.registry import registry as default_registry
from awa_django.sql import statements
from awa_django.worker.attempts import Attempts
from awa_django.worker.capacity import ClusterMember
from awa_django.worker.completer import WRITE_ERRORS, Completer
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.context import ClaimedJob, InFlight
from awa_django.worker.db import make_pool, retrying
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.executor import Executor
from awa_django.worker.health import SnapshotWriter
from awa_django.worker.heartbeat import Heartbeat
from awa_django.worker.listener import BacklogProbe, Listener
from awa_django.worker.lookbehind import LookBehind
from awa_django.worker.maintenance import Maintenance
from awa_django.worker.reconfigure import Reconfigurer
from awa_django.worker.snapshot import WorkerFlags, queues_to_json

logger = logging.getLogger(__name__)

# After a second stop signal the process ends within this many seconds, whatever still holds it
# (a handler that ignores cancellation, a thread, a connection that does not close).
FORCED_EXIT_SECONDS = 0.8
# Cancelled at the shutdown timeout, a handler gets this long to end before its row is handed back.
# (more than the executor's SYNC_CANCEL_GRACE, so a sync handler returning in that grace is kept).
HAND_BACK_GRACE = 1.5


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
        self._owns_process = False  # signal handlers installed: this worker is the process
        self.executor = Executor(self.registry, config.sync_threads)
        self.pool: AsyncConnectionPool = make_pool(config.database_alias, config.pool_size)
        self.completer = Completer(self.pool, hand_over=self)
        self.attempts = Attempts(self, self.executor, self.completer)
        self.maintenance = Maintenance(self)
        self.look_behind = LookBehind(self)
        self.cluster = ClusterMember(self) if config.capacity_scope == "cluster" else None
        self.probe = BacklogProbe(self)
        self.listener = Listener(self, self.probe)
        self.heartbeat = Heartbeat(self)
        self.snapshots = SnapshotWriter(self)
        self.reconfigurer = Reconfigurer(self)
        self.stopping = False
        self.forced = False
        self._stop = asyncio.Event()
        self._forced_event = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ready = asyncio.Event()
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
        """Sleep, or less if the worker stops meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    def give_back(self, permits: Iterable[Permit]) -> None:
        """Release permits a poll could not use (each release wakes only who may take it)."""
        release_all(permits)

    def dispatch(self, job: ClaimedJob, permit: Permit) -> None:
        """Run a claimed job on its permit (``awa_django.worker.attempts``)."""
        self.attempts.start(job, permit)

    def queue_deadline(self, queue: str) -> float | None:
        dispatcher = self.dispatchers.get(queue)
        return dispatcher.config.deadline if dispatcher is not None else None

    @property
    def in_flight(self) -> dict[int, InFlight]:
        """The attempts running (or being written), by job id."""
        return self.attempts.in_flight

    @property
    def overrunning(self) -> set[int]:
        """Sync handlers past their deadline whose thread still runs: the row is written, the slot held."""
        return self.attempts.overrunning

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
                plan[queue] = (kept, dispatcher.hand_over_params(len(kept)))
        return plan

    def adopt(self, queue: str, rows: list[tuple[Any, ...]], permits: list[Permit], *, ran_dry: bool = True) -> None:
        dispatcher = self.dispatchers.get(queue)
        for row, permit in zip(rows, permits, strict=False):
            self.dispatch(ClaimedJob(*row), permit)
        unfilled = permits[len(rows) :]
        release_all(unfilled)
        if dispatcher is not None:
            dispatcher.claimed(rows, ran=ran_dry)
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
                self.start_dispatcher(queue)
            self._spawn("awa-completer", self.completer.run())
            self._spawn("awa-listener", self.listener.run())
            self._spawn("awa-heartbeat", self.heartbeat.run())
            self._spawn("awa-maintenance", self.maintenance.run())
            self._spawn("awa-backlog", self.probe.run())
            self._spawn("awa-look-behind", self.look_behind.run())
            if self.cluster is not None:
                self._spawn("awa-capacity", self.cluster.run())
            self._spawn("awa-snapshot", self.snapshots.run())
            self._spawn("awa-reconfigure", self.reconfigurer.run())
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

    def start_dispatcher(self, queue: QueueConfig) -> Dispatcher:
        dispatcher = Dispatcher(self, queue)
        self.dispatchers[queue.name] = dispatcher
        self._spawn(f"awa-dispatch-{queue.name}", dispatcher.run())
        return dispatcher

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
            jobs = [entry.task for entry in self.in_flight.values() if not entry.task.done()]
            left = deadline - time.monotonic()
            if not jobs or left <= 0:
                break
            if not await self._unless_forced(asyncio.wait(jobs, timeout=left)):
                return
        if any(not entry.task.done() for entry in self.in_flight.values()):
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
        left = [entry for entry in self.in_flight.values() if not entry.task.done() and not entry.context.finishing]
        if not left:
            return
        for entry in left:
            entry.context.cancel()
            entry.task.cancel()
        if not await self._unless_forced(asyncio.wait([entry.task for entry in left], timeout=HAND_BACK_GRACE)):
            return
        left = [entry for entry in left if not entry.context.finishing]
        if not left:
            return
        logger.warning(
            "shutdown timeout (%.1fs) passed with %d job(s) running; handing them back as retryable",
            self.config.shutdown_timeout,
            len(left),
        )
        params = {
            "ids": [entry.job.id for entry in left],
            "leases": [entry.job.run_lease for entry in left],
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
            for entry in list(self.in_flight.values()):
                entry.context.cancel()
                entry.task.cancel()
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

    # --- what the side loops read (each meets the worker through its own Protocol) ---------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def listening(self) -> bool:
        """The LISTEN connection is up and answers its health check."""
        return self.listener.listening

    @property
    def is_leader(self) -> bool:
        return self.maintenance.is_leader

    def reconfigure_soon(self) -> None:
        self.reconfigurer.soon()

    def flags(self) -> WorkerFlags:
        return WorkerFlags(
            listening=self.listening,
            leader=self.is_leader,
            stopping=self.stopping,
            in_flight=len(self.in_flight),
            sync_running=self.executor.sync_running,
            capacity_scope=self.config.capacity_scope,
            sync_overrunning=len(self.overrunning),
            cluster_caps=self.cluster.caps if self.cluster is not None else None,
            cluster_leased=self.cluster.leased if self.cluster is not None else None,
        )

    def health(self, available_rows: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Per queue: mode, capacity (HardReserved / Weighted), in-flight and available permits,
        as the snapshot row holds them (``awa_django.worker.snapshot.QueueSnapshot.to_json``)."""
        return queues_to_json(self.snapshots.queues(available_rows))
