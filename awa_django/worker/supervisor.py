"""The supervisor: starts, watches and stops the worker's tasks, and owns the shutdown order.

Tasks, each named but the attempts (one per running attempt, from its permit to its written
outcome: ``attempts``, whose ``in_flight`` maps job ids to them; a name per job cost 8 % of the
per-job Python):

- ``awa-runner-<queue>``: one runner per queue, its claim loop (``runner``);
- ``awa-completer``: the batched writer, which also hands freed permits to the next jobs (``completer``);
- ``awa-listener``: the LISTEN loop (``listener``);
- ``awa-backlog``: the backlog probe, NOTIFY's backstop (``listener``);
- ``awa-look-behind``: finds jobs behind the lane cursors (``lookbehind``);
- ``awa-heartbeat``: heartbeats of the running rows (``heartbeat``);
- ``awa-maintenance``: the maintenance loop; only the leader does the work (``maintenance``);
- ``awa-maintenance-<duty>``: while this worker leads, retention and the history rollup, each on
  its own task and connection beside the leader's round (``duty``);
- ``awa-capacity``: in capacity scope "cluster", this worker's capacity reports (``capacity``);
- ``awa-snapshot``: this worker's ``WorkerInstance`` row (``health``);
- ``awa-reconfigure``: Queue rows re-read and applied live (``reconfigure``), and on the same
  tick the operators' requests to this worker: drain, hold or resume a queue (``control``).

Each part receives the ``Runtime`` (``runtime``), never the ``Worker``. A side task that dies is
noticed, logged, and stops the worker with an error.

Shutdown order: stop claiming; let in-flight jobs finish within the shutdown timeout (their
heartbeats go on, until the close cancels the heartbeat loop); cancel
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
import threading
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator
from awa_django.context import InFlight
from awa_django.observability.sink import MetricsSink, NoopSink, gauge_reader
from awa_django.registry import Registry
from awa_django.registry import registry as default_registry
from awa_django.snapshot import WorkerFlags, queues_to_json
from awa_django.sql import statements
from awa_django.worker.attempts import Attempts
from awa_django.worker.capacity import ClusterMember
from awa_django.worker.completer import WRITE_ERRORS, Completer
from awa_django.worker.config import WorkerConfig
from awa_django.worker.control import Control
from awa_django.worker.db import make_pool, retrying
from awa_django.worker.executor import Executor
from awa_django.worker.health import SnapshotWriter
from awa_django.worker.heartbeat import Heartbeat
from awa_django.worker.listener import BacklogProbe, Listener
from awa_django.worker.lookbehind import LookBehind
from awa_django.worker.maintenance import Maintenance
from awa_django.worker.reconfigure import Reconfigurer
from awa_django.worker.runner import Runners
from awa_django.worker.runtime import Identity, Runtime
from awa_django.worker.stop import Stop

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
        registry = registry or default_registry
        metrics = metrics or NoopSink()
        # In capacity scope "cluster" the leader's caps decide, per queue; the allocator enforces
        # them (hard-reserved style).
        allocator = Allocator(None if config.capacity_scope == "cluster" else config.global_max_workers, config.queues)
        stop = Stop()
        pool = make_pool(config.database_alias, config.pool_size)
        identity = Identity()
        self.executor = Executor(registry, config.sync_threads, alias=config.database_alias)
        self.completer = Completer(pool)
        attempts = Attempts(self.executor, self.completer, registry=registry, metrics=metrics, stop=stop)
        runners = Runners(config, allocator, pool, stop, attempts=attempts, spawn=self._spawn, worker=identity.name)
        self.completer.hand_over = runners  # the writer passes freed permits to the queues' next jobs
        self.runtime = runtime = Runtime(
            config=config,
            identity=identity,
            allocator=allocator,
            pool=pool,
            registry=registry,
            metrics=metrics,
            stop=stop,
            runners=runners,
            attempts=attempts,
        )
        self.maintenance = Maintenance(runtime)
        self.look_behind = LookBehind(runtime)
        self.cluster = ClusterMember(runtime) if config.capacity_scope == "cluster" else None
        self.control = Control(runtime, on_drain=self._drain_requested)
        self.reconfigurer = Reconfigurer(runtime, control=self.control)
        self.probe = BacklogProbe(runtime)
        self.listener = Listener(runtime, self.probe, self.reconfigurer.soon)
        self.heartbeat = Heartbeat(runtime)
        self.snapshots = SnapshotWriter(runtime, self.flags)
        self._owns_process = False  # signal handlers installed: this worker is the process
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ready = asyncio.Event()
        self.failure: BaseException | None = None
        metrics.bind(gauge_reader(self))

    # --- what the command, the metrics and tests read ---------------------------------------

    @property
    def config(self) -> WorkerConfig:
        return self.runtime.config

    @property
    def allocator(self) -> Allocator:
        return self.runtime.allocator

    @property
    def runners(self) -> Runners:
        return self.runtime.runners

    @property
    def instance_id(self) -> Any:
        return self.runtime.identity.instance_id

    @property
    def hostname(self) -> str:
        return self.runtime.identity.hostname

    @property
    def pid(self) -> int:
        return self.runtime.identity.pid

    @property
    def stopping(self) -> bool:
        return self.runtime.stop.stopping

    @property
    def forced(self) -> bool:
        return self.runtime.stop.forced

    @property
    def listening(self) -> bool:
        """The LISTEN connection is up and answers its health check."""
        return self.listener.listening

    @property
    def is_leader(self) -> bool:
        return self.maintenance.is_leader

    @property
    def pool(self) -> AsyncConnectionPool:
        """The worker's connection pool (the readiness probe asks the database through it)."""
        return self.runtime.pool

    @property
    def in_flight(self) -> Mapping[int, InFlight]:
        """The attempts running (or being written), by job id."""
        return self.runtime.attempts.in_flight

    @property
    def overrunning(self) -> set[int]:
        """Sync handlers past their deadline whose thread still runs: the row is written, the slot held."""
        return self.runtime.attempts.overrunning

    def health(self, available_rows: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Per queue: mode, capacity (HardReserved / Weighted), in-flight and available permits,
        as the snapshot row holds them (``awa_django.snapshot.QueueSnapshot.to_json``)."""
        return queues_to_json(self.snapshots.queues(available_rows))

    def flags(self) -> WorkerFlags:
        """The liveness flags the snapshot row carries (``WorkerInstance.flags``)."""
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
            draining=self.control.draining,
            held_queues=tuple(sorted(self.control.held)),
            heartbeat_staleness=self.config.heartbeat_staleness,
        )

    # --- control -------------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop (first signal); a second request stops at once."""
        stop = self.runtime.stop
        if stop.stopping:
            if not stop.forced:
                logger.warning("second stop request: stopping at once; running jobs will be rescued")
                stop.force()
                if self._owns_process:
                    self._arm_forced_exit()
            return
        logger.info("stopping: no new claims; in-flight jobs get %.1fs", self.config.shutdown_timeout)
        stop.begin()
        self.runtime.runners.wake_all()

    async def _drain_requested(self) -> None:
        """An operator asked this worker to drain (a WorkerRequest): SIGTERM's stop, and one
        snapshot written at once so the admin shows it draining (the snapshot loop ends with the stop)."""
        self.request_stop()
        try:
            await self.snapshots.write()
        except WRITE_ERRORS as exc:
            logger.warning("snapshot write failed: %r", exc)

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
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.request_stop)

    # --- the run ---------------------------------------------------------------------

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        runtime = self.runtime
        self._install_signals()
        try:
            # The startup's waits for the database hold no job: a first stop request ends them.
            if not await runtime.stop.unless_stopping(retrying("opening the connection pool", self._open_pool)):
                return
            names = list(self.config.queues)
            shown = ",".join(names[:20]) + (f",… ({len(names)} queues)" if len(names) > 20 else "")
            logger.info(
                "worker started instance=%s mode=%s capacity_scope=%s global_max_workers=%s queues=%s pool_size=%s",
                self.instance_id,
                self.config.mode,  # as configured: in cluster scope the allocator enforces the leader's caps
                self.config.capacity_scope,
                self.config.global_max_workers,
                shown,
                self.config.pool_size,
            )
            # Before any claim: a key's cap must hold from the first one.
            reading = asyncio.ensure_future(retrying("reading fair-key settings", self.reconfigurer.read_key_settings))
            if not await runtime.stop.unless_stopping(reading):
                return
            key_settings = reading.result()
            for queue in self.config.queues.values():
                runtime.runners.serve(queue)
            runtime.runners.apply_keys(key_settings)
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
            await runtime.stop.wait()
            if not self.forced:
                await self._drain()
        finally:
            await self._close()
        if self.failure is not None:
            raise self.failure

    async def _open_pool(self) -> None:
        """Open the pool and wait for one connection. Not ``open(wait=True)``: psycopg_pool closes a
        pool whose opening wait times out, and a closed pool cannot be opened again (every retry
        was PoolClosed, for good); a pool left open keeps reconnecting, and the wait is retried."""
        pool = self.runtime.pool
        await pool.open(wait=False)
        async with pool.connection(timeout=10):
            pass

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

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.request_stop)
                self._owns_process = True

    async def _drain(self) -> None:
        """Stop claiming, then wait for in-flight jobs within the timeout; a second signal cuts
        every wait short (the rescue path then recovers what was left running)."""
        stop = self.runtime.stop
        runner_tasks = [t for n, t in self._tasks.items() if n.startswith("awa-runner-")]
        if not await stop.unless_forced(asyncio.gather(*runner_tasks, return_exceptions=True)):
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
            if not await stop.unless_forced(asyncio.wait(jobs, timeout=left)):
                return
        if any(not entry.task.done() for entry in self.in_flight.values()):
            await self._hand_back()
        # The last results: bounded too, a database that stays away must not hold the stop forever.
        flush = self._write_budget
        flushing = asyncio.ensure_future(asyncio.wait_for(self.completer.wait_idle(), flush))
        if await stop.unless_forced(flushing) and isinstance(flushing.exception(), TimeoutError):
            logger.error(
                "could not write %d finished attempt(s) within %.1fs of stopping; their rows stay running "
                "until the rescue retries them",
                self.completer.pending,
                flush,
            )

    @property
    def _write_budget(self) -> float:
        """How long each of the stop's last writes (the hand-back, the flush) may wait for the database."""
        return max(self.config.shutdown_timeout, 5.0)

    async def _hand_back(self) -> None:
        """Cancel the handlers still running, then hand back the attempts that did not return.

        An attempt whose handler has returned (``finishing``) is never handed back: its outcome is
        written by the writer. The handlers are cancelled first and given a moment to end, so one
        that returns meanwhile (an async handler that finishes on cancellation, a sync handler
        whose thread returned as the stop came) is written with its real outcome too.
        """
        stop = self.runtime.stop
        left = [entry for entry in self.in_flight.values() if not entry.task.done() and not entry.context.finishing]
        if not left:
            return
        for entry in left:
            entry.context.cancel()
            entry.task.cancel()
        if not await stop.unless_forced(asyncio.wait([entry.task for entry in left], timeout=HAND_BACK_GRACE)):
            return
        left = [entry for entry in left if not entry.context.finishing]
        if not left:
            return
        logger.warning(
            "shutdown timeout (%.1fs) passed with %d job(s) running; handing them back as retryable",
            self.config.shutdown_timeout,
            len(left),
        )
        ids = [entry.job.id for entry in left]
        params = {
            "ids": ids,
            "leases": [entry.job.run_lease for entry in left],
            "reason": f"worker stopped: the job was still running after the {self.config.shutdown_timeout}s "
            "shutdown timeout; handed back to run again",
        }

        self.completer.note_handed_back(ids)

        budget = self._write_budget

        async def write() -> None:
            async with self.runtime.pool.connection(timeout=budget) as conn:
                await conn.execute(statements["release_jobs"], params)

        # Bounded as a whole: with the database gone, five tries of the pool's own 30 s wait held
        # the stop for minutes, past any orchestrator's grace period.
        writing = asyncio.ensure_future(asyncio.wait_for(retrying("release_jobs", write, attempts=5), budget))
        if not await stop.unless_forced(writing):
            return
        failure = writing.exception()
        if isinstance(failure, (*WRITE_ERRORS, TimeoutError)):
            logger.error("could not hand back %d job(s): %r; the rescue path will recover them", len(left), failure)
        elif failure is not None:
            raise failure

    async def _close(self) -> None:
        self.runtime.stop.begin()
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
        if not self.forced and self.ready.is_set():  # before ready: no snapshot, no cluster report yet
            if self.cluster is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.cluster.leave(), 2)
            with contextlib.suppress(*WRITE_ERRORS, TimeoutError):
                async with asyncio.timeout(2), self.runtime.pool.connection(timeout=2) as conn:
                    await conn.execute(statements["delete_worker_instance"], {"instance_id": self.instance_id})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.maintenance.close(), grace)
        await self.runtime.pool.close(timeout=grace)
        self.executor.shutdown()
        # Only the refusals that happened are named: "lost=0" on every clean stop reads as a loss.
        completer = self.completer
        refused = {"discarded": completer.discarded, "handed_back": completer.handed_back, "lost": completer.lost}
        logger.info(
            "worker stopped instance=%s written=%d%s",
            self.instance_id,
            completer.written,
            "".join(f" {name}={count}" for name, count in refused.items() if count),
        )
