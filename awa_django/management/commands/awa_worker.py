"""``manage.py awa_worker``: parse, validate, run the worker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from argparse import ArgumentParser
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import InterfaceError, OperationalError, connections

from awa_django.conf import CAPACITY_SCOPES, EVENT_LOOPS, AwaSettings, InvalidSettingsError, awa_settings
from awa_django.defaults import DATABASE_WAIT_TIMEOUT_DEFAULT, NAME_MAX_LENGTH
from awa_django.exceptions import ConfigurationError, MinWorkersExceedGlobalError
from awa_django.jobspec import name_problem
from awa_django.management.arguments import global_max_workers, port, positive_int, seconds, seconds_or_zero
from awa_django.observability import joblog
from awa_django.observability.endpoints import EndpointServer
from awa_django.observability.probes import Probes, expected_migrations
from awa_django.observability.sink import MetricsSink, load_sink
from awa_django.observability.summary import SUMMARY_INTERVAL_DEFAULT, SummarySink
from awa_django.validation import text_problem
from awa_django.worker.db import Backoff
from awa_django.worker.process import loop_factory, tune_gc

if TYPE_CHECKING:
    from awa_django.worker import Worker
    from awa_django.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

# What each -v shows: the level of the "awa_django" logger, the level of "awa_django.jobs" (one
# line per attempt outcome, completed at DEBUG), and the words of --help. The worker's own DEBUG
# lines (claims, hand-overs, wake-ups, notifications) come several per job, so they wait for -v 3.
VERBOSITY: dict[int, tuple[int, int, str]] = {
    0: (logging.WARNING, logging.WARNING, "warnings and errors: failed, cancelled, lost and rescued jobs"),
    1: (
        logging.INFO,
        logging.INFO,
        "also start and stop, each retry, and a summary every --summary-interval while jobs run (the default; "
        "a level LOGGING sets for the awa_django logger is kept)",
    ),
    2: (logging.INFO, logging.DEBUG, "also a line for every completed job"),
    3: (logging.DEBUG, logging.DEBUG, "also the worker's internals at DEBUG: claims, hand-overs, wake-ups"),
}
VERBOSITY_HELP = "; ".join(f"{level}: {words}" for level, (_, _, words) in VERBOSITY.items())


def command_settings() -> AwaSettings:
    """``awa_settings()``, with a bad value as the CommandError the command exits with."""
    try:
        return awa_settings()
    except InvalidSettingsError as exc:
        raise CommandError(str(exc)) from exc


def database_wait_timeout(option: float | None) -> float:
    """--wait-for-database, else AWA["DATABASE_WAIT_TIMEOUT"] (seconds, 0 or more)."""
    if option is not None:
        return option
    return command_settings().DATABASE_WAIT_TIMEOUT


def _describe_database(alias: str) -> str:
    """``'name' at host:port`` of a database alias, for messages (never the password)."""
    config = connections[alias].settings_dict
    host = config.get("HOST") or "the local socket"
    port = f":{config['PORT']}" if config.get("PORT") else ""
    return f"{alias!r} ({config.get('NAME')!r} at {host}{port})"


def with_database(alias: str, timeout: float, what: str, operation: Callable[[], T], *, started: float) -> T:
    """Run a startup ``operation`` on Django's connection, waiting for an unreachable database.

    In an orchestrated deployment the worker and Postgres start together: a connection error
    before ``timeout`` seconds (counted from ``started``) is retried with the runtime's backoff
    (0.05 s doubling to 5 s), one log line per attempt; after it, a CommandError names the
    database and the setting.
    """
    backoff = Backoff()
    attempt = 0
    while True:
        attempt += 1
        try:
            result = operation()
        except (OperationalError, InterfaceError) as exc:
            connections[alias].close()  # the next attempt opens a fresh connection
            waited = time.monotonic() - started
            error = " ".join(str(exc).split())[:300]
            if waited >= timeout:
                raise CommandError(
                    f"database {_describe_database(alias)} is still unreachable after {waited:.1f}s "
                    f"({attempt} attempt(s) at {what}): {error}; start it or fix DATABASES[{alias!r}], or wait "
                    f"longer with --wait-for-database SECONDS or AWA['DATABASE_WAIT_TIMEOUT'] (now {timeout:g}s)"
                ) from None
            delay = min(backoff.next(), timeout - waited)
            logger.warning(
                "database unavailable at startup, retrying in %.2fs database=%s what=%s attempt=%d "
                "waited=%.1fs timeout=%gs error=%s",
                delay,
                alias,
                what,
                attempt,
                waited,
                timeout,
                error,
            )
            time.sleep(delay)
            continue
        if attempt > 1:
            logger.info(
                "database reachable database=%s what=%s attempts=%d waited=%.1fs",
                alias,
                what,
                attempt,
                time.monotonic() - started,
            )
        return result


class Command(BaseCommand):
    help = "Run an awa_django worker: one dispatcher per queue, until SIGTERM/SIGINT (a second signal stops at once)."

    def add_base_argument(self, parser: CommandParser, *args: Any, **kwargs: Any) -> None:
        if "--verbosity" in args:  # Django's words ("2=verbose output") do not say what the worker logs
            kwargs["help"] = VERBOSITY_HELP
        super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="serve this queue (repeatable); default: every Queue row plus every queue a @job names",
        )
        parser.add_argument(
            "--global-max-workers",
            type=global_max_workers,
            metavar="N",
            help="weighted mode: at most N jobs at once in this worker, shared by weight over min_workers "
            "(default: AWA['GLOBAL_MAX_WORKERS']; unset = hard-reserved, each queue its max_workers)",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=seconds,
            metavar="SECONDS",
            help="time in-flight jobs get to finish after SIGTERM/SIGINT, above 0; jobs still running then "
            "are handed back (default: AWA['SHUTDOWN_TIMEOUT'], 30)",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds,
            metavar="SECONDS",
            help="seconds between polls when no NOTIFY arrives",
        )
        parser.add_argument(
            "--heartbeat-interval",
            type=seconds,
            metavar="SECONDS",
            help="seconds between heartbeats of running jobs; below --heartbeat-staleness "
            "(default: AWA['HEARTBEAT_INTERVAL'], 5)",
        )
        parser.add_argument(
            "--capacity-scope",
            choices=list(CAPACITY_SCOPES),
            help="process: the capacity settings hold in this process (default); cluster: for every "
            "live worker together (AWA['CAPACITY_SCOPE'])",
        )
        parser.add_argument(
            "--wait-for-database",
            type=seconds_or_zero,
            metavar="SECONDS",
            help="while the database is unreachable at startup, retry for up to this long before exiting "
            f"(default: AWA['DATABASE_WAIT_TIMEOUT'], {DATABASE_WAIT_TIMEOUT_DEFAULT:g}; 0 = do not wait)",
        )
        parser.add_argument(
            "--heartbeat-staleness",
            type=seconds,
            metavar="SECONDS",
            help="a running job whose heartbeat is older than this is rescued",
        )

        parser.add_argument(
            "--metrics",
            metavar="SINK",
            help="record metrics: none, prometheus (awa-django[metrics]), otel (awa-django[otel]) or a dotted "
            "path to a MetricsSink subclass (default: AWA['METRICS'], none; prometheus when --metrics-port is given)",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            metavar="PORT",
            help="serve this worker's Prometheus metrics on http://ADDR:PORT/metrics (default: AWA['METRICS_PORT']), "
            "with the /healthz and /readyz probes; each worker process on a host needs its own port",
        )
        parser.add_argument(
            "--health-port",
            type=port,
            metavar="PORT",
            help="serve the probes on http://ADDR:PORT/healthz (liveness: the event loop turns) and /readyz "
            "(ready: started, not draining, database answering, migrations applied); ADDR is "
            "AWA['METRICS_ADDR']; the metrics port serves them too",
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            metavar="N",
            default=1,
            help="run N worker processes on this host, restarted if one dies; in capacity scope process the "
            "capacity settings hold for the N together (each takes its part), and process I serves metrics "
            "and probes on the given ports + I (default: 1)",
        )
        parser.add_argument("--process-index", type=int, help=argparse.SUPPRESS)
        parser.add_argument(
            "--event-loop",
            choices=EVENT_LOOPS,
            help="auto: uvloop where it is installed (awa-django[uvloop]), else asyncio's own; uvloop: "
            "require it; asyncio: the standard loop (default: AWA['EVENT_LOOP'], auto)",
        )
        parser.add_argument(
            "--summary-interval",
            type=seconds,
            metavar="SECONDS",
            default=SUMMARY_INTERVAL_DEFAULT,
            help="at -v 1 and above, log what the worker did (per queue: completed, retried, failed, wait p50) "
            f"every SECONDS while jobs run; nothing while idle (default: {SUMMARY_INTERVAL_DEFAULT:g})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        command_settings()  # every bad AWA value as a CommandError, before anything starts
        self._configure_logging(options["verbosity"])
        queues = options["queues"]
        if queues:
            bad = [q for q in queues if not q.strip() or len(q) > NAME_MAX_LENGTH]
            if bad:
                raise CommandError(f"invalid queue name {bad[0]!r}: use 1 to {NAME_MAX_LENGTH} characters")
            for name in queues:
                # A lone surrogate (bytes that are not UTF-8 in argv); whitespace around it or a
                # control character, which no enqueued queue name has.
                problem = text_problem(name) or name_problem(name)
                if problem:
                    raise CommandError(f"invalid queue name {name!r}: it {problem}")
        processes, index = options["processes"], options.get("process_index")
        if index is not None and not 0 <= index < processes:
            raise CommandError(f"--process-index {index} is outside 0 to {processes - 1} (--processes {processes})")
        if processes > 1 and index is None:
            self._run_processes(options)
            return
        offset = index or 0
        if index is not None:
            from awa_django.management.processes import follow_parent

            follow_parent()
        metrics_port = options.get("metrics_port")
        if metrics_port is None and command_settings().METRICS_PORT is not None and offset:
            metrics_port = command_settings().METRICS_PORT
        metrics = metrics_sink(options.get("metrics"), None if metrics_port is None else metrics_port + offset)
        if options.get("health_port") is not None:
            options["health_port"] += offset
        if options["verbosity"] >= 1:
            metrics = SummarySink(metrics, options["summary_interval"])
        probes = Probes(expected_migrations())
        try:
            health = probe_endpoints(metrics, options.get("health_port"), probes)
        except ConfigurationError as exc:
            metrics.close()
            raise CommandError(str(exc)) from exc
        try:
            self._run(options, metrics, probes if metrics.endpoints is not None or health is not None else None)
        finally:
            metrics.close()
            if health is not None:
                health.close()

    def _run_processes(self, options: dict[str, Any]) -> None:
        """The parent of ``--processes N``: check that every child could start, then run them."""
        from awa_django.management.processes import Children

        processes = options["processes"]
        if sys.argv[1:2] != ["awa_worker"]:
            raise CommandError(
                "--processes runs the worker's own command line again in each process; start it as "
                "`python manage.py awa_worker --processes N ...` (or django-admin), not through call_command"
            )
        for key in ("metrics_port", "health_port"):
            first = options.get(key) or (command_settings().METRICS_PORT if key == "metrics_port" else None)
            if first is not None and first + processes - 1 > 65535:
                raise CommandError(
                    f"--{key.replace('_', '-')} {first} + {processes - 1} is past 65535: process I serves on "
                    f"the port + I; give a lower port"
                )
        for index in range(processes):  # a split that cannot be made fails here, not in a restart loop
            self._build_config(options, (index, processes))
        connections.close_all()  # the children open their own
        code = Children(sys.argv, processes).run()
        if code != 0:
            raise CommandError(
                f"a worker process of --processes {processes} did not stop cleanly (see its lines above); "
                "send one SIGTERM and allow --shutdown-timeout for a clean stop"
            )

    def _build_config(
        self, options: dict[str, Any], process: tuple[int, int] | None, started: float | None = None
    ) -> tuple[WorkerConfig, list[dict[str, Any]]]:
        """The worker's configuration from the settings, the options and the Queue rows (read here,
        waiting for the database as at startup); every refusal a CommandError naming the value."""
        from awa_django.registry import registry
        from awa_django.worker import build_config

        queues = options["queues"]
        alias = awa_settings().DATABASE_ALIAS
        timeout = database_wait_timeout(options["wait_for_database"])
        started = time.monotonic() if started is None else started
        with_database(alias, timeout, "reading the applied migrations", lambda: _check_migrated(alias), started=started)
        rows = with_database(alias, timeout, "reading the Queue rows", _read_queue_rows, started=started)
        try:
            config = build_config(
                queue_rows=rows,
                handler_queues=registry.queues(),
                queues=queues,
                process=process,
                global_max_workers=options["global_max_workers"],
                shutdown_timeout=options["shutdown_timeout"],
                poll_interval=options["poll_interval"],
                heartbeat_interval=options["heartbeat_interval"],
                heartbeat_staleness=options["heartbeat_staleness"],
                capacity_scope=options["capacity_scope"],
            )
        except MinWorkersExceedGlobalError as exc:
            served = set(queues) if queues else None
            largest = sorted(
                ((row["min_workers"], row["name"]) for row in rows if served is None or row["name"] in served),
                key=lambda pair: (-pair[0], pair[1]),
            )
            listing = ", ".join(f"{name}={n}" for n, name in largest[:5] if n)
            raise CommandError(
                f"{exc} (min_workers of the largest queues: {listing}; edit them in the Queue admin)"
            ) from exc
        except ConfigurationError as exc:
            raise CommandError(f"{exc}") from exc
        return config, rows

    def _run(self, options: dict[str, Any], metrics: MetricsSink, probes: Probes | None) -> None:
        from awa_django.models import Queue
        from awa_django.worker import Worker

        alias = awa_settings().DATABASE_ALIAS
        timeout = database_wait_timeout(options["wait_for_database"])
        started = time.monotonic()
        index = options.get("process_index")
        config, rows = self._build_config(
            options, None if index is None else (index, options["processes"]), started=started
        )
        # Every served queue gets a Queue row, so operators see it in the admin and can tune it.
        known = {row["name"] for row in rows}
        if options["queues"] and not index:  # with --processes N, process 0 says it once
            self._warn_unknown_queues(options["queues"], known)
        missing = [Queue(name=name) for name in config.queues if name not in known]
        if missing:
            with_database(
                alias,
                timeout,
                "creating Queue rows",
                lambda: Queue.objects.using(alias).bulk_create(missing, ignore_conflicts=True),
                started=started,
            )
        # Periodic jobs declared in code become Schedule rows (the maintenance leader fires them).
        from awa_django.services.schedules import sync_schedules

        synced = with_database(alias, timeout, "synchronising the schedules", sync_schedules, started=started)
        if synced.created or synced.updated or synced.removed:
            logging.getLogger("awa_django").info(
                "schedules synchronised from code created=%s updated=%s disabled=%s",
                synced.created,
                synced.updated,
                synced.removed,
            )
        worker = Worker(config, metrics=metrics)
        try:
            factory, loop_name = loop_factory(options.get("event_loop") or command_settings().EVENT_LOOP)
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        logging.getLogger("awa_django").info("event loop %s", loop_name)
        tune_gc(command_settings().GC_FREEZE)
        try:
            with asyncio.Runner(loop_factory=factory) as runner:
                abandoned = runner.run(run_worker(worker, probes))
                if abandoned:
                    # Closing the Runner would wait for them: asyncio cancels every task left and
                    # awaits it, and a handler that swallows its cancellation runs on for as long as
                    # it likes, well past every shutdown timeout.
                    logging.getLogger("awa_django").warning(
                        "%d async handler(s) still running after the stop (they ignore cancellation); "
                        "exiting without waiting for them (their jobs were handed back or will be rescued)",
                        abandoned,
                    )
                    logging.shutdown()
                    os._exit(1)
        except KeyboardInterrupt:  # pragma: no cover - signals are handled on the loop
            pass
        if worker.executor.sync_running:
            logging.getLogger("awa_django").warning(
                "%d sync handler(s) still running in threads; exiting without waiting for them "
                "(their jobs were handed back or will be rescued)",
                worker.executor.sync_running,
            )
            os._exit(1)
        if worker.failure is not None:
            raise CommandError(f"worker stopped after a failure: {worker.failure!r}")
        if worker.forced:
            # A second signal cut the drain short: say so in the exit status, not only in the log.
            raise CommandError(
                "forced stop (a second SIGTERM/SIGINT): jobs still running were left to the rescue; "
                "send one signal and allow --shutdown-timeout for a clean stop"
            )

    def _warn_unknown_queues(self, queues: list[str], rows: set[str]) -> None:
        """A -q name that no Queue row and no @job names is most likely a typo; served anyway, it
        gets a Queue row, and every later worker run without -q serves it too: say so now."""
        from awa_django.registry import registry

        declared = registry.queues()
        known = sorted(rows | declared)
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        for name in dict.fromkeys(queues):
            if name not in rows and name not in declared:
                self.stderr.write(
                    f"warning: queue {name!r} (-q) has no Queue row and no @job names it; this worker serves "
                    "it and creates its Queue row, which every later worker run without -q serves too. "
                    f"A typo? Known queues: {shown or 'none'}. If {name!r} is meant, create it in the Queue "
                    f"admin, or declare a @job with queue={name!r}.",
                    style_func=self.style.WARNING,
                )

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("awa_django")
        verbosity = min(max(verbosity, 0), max(VERBOSITY))
        level, jobs_level, _ = VERBOSITY[verbosity]
        if verbosity != 1 or logger.level == logging.NOTSET:
            logger.setLevel(level)
        if verbosity != 1:  # at -v 1 the job lines follow awa_django's level, LOGGING's if it set one
            joblog.logger.setLevel(jobs_level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            logger.addHandler(handler)


def probe_endpoints(metrics: MetricsSink, health_port: int | None, probes: Probes) -> EndpointServer | None:
    """Attach ``probes`` to the metrics port, if one is served; serve them on ``health_port`` too
    (unless it is that same port). Returns the server this started, for the caller to close."""
    if metrics.endpoints is not None:
        metrics.endpoints.probes = probes
        if health_port is None or health_port == metrics.endpoints.port:
            return None
    if health_port is None:
        return None
    server = EndpointServer(health_port, command_settings().METRICS_ADDR)
    server.probes = probes
    logger.info("serving probes addr=%s port=%s paths=/healthz,/readyz", server.addr, server.port)
    return server


# After the worker stopped, how long attempts it cancelled get to end before the process stops
# waiting for them (a handler that swallows cancellation never ends).
ABANDON_AFTER = 1.0


async def run_worker(worker: Worker, probes: Probes | None) -> int:
    """``worker.run()``, with the probes' loop beside it on the same event loop (so that liveness
    measures that loop) for as long as the worker runs, draining included. Returns how many
    attempts' handlers are still running after the stop (their rows handed back or left to the
    rescue): the caller must not wait for them."""
    if probes is None:
        await worker.run()
        return await _unfinished(worker)
    watcher = asyncio.create_task(probes.run(worker), name="awa-probes")
    try:
        await worker.run()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return await _unfinished(worker)


async def _unfinished(worker: Worker) -> int:
    left = [entry.task for entry in worker.in_flight.values() if not entry.task.done()]
    if not left:
        return 0
    _, pending = await asyncio.wait(left, timeout=ABANDON_AFTER)
    return len(pending)


def metrics_sink(name: str | None, port_option: int | None) -> MetricsSink:
    """The sink from --metrics/--metrics-port or AWA['METRICS']/AWA['METRICS_PORT'], serving its
    port if one is set; every mistake is a CommandError naming the value and the fix."""
    current = command_settings()
    listen_port = port_option if port_option is not None else current.METRICS_PORT
    if name is None:
        name = current.METRICS
        if name == "none" and listen_port is not None:
            name = "prometheus"  # a port to serve on says what is wanted
    addr = current.METRICS_ADDR
    try:
        sink = load_sink(name)
        if listen_port is not None:
            sink.serve(listen_port, addr)
    except ConfigurationError as exc:
        raise CommandError(str(exc)) from exc
    return sink


def _check_migrated(alias: str) -> None:
    """A CommandError naming the fix when the jobs' database lacks awa_django's latest migrations
    (a worker deployed before `migrate`, or pointed at another database): the system checks that
    read rows stay quiet then, and the first query failed with a bare "relation does not exist"."""
    from django.db.migrations.recorder import MigrationRecorder

    applied = {name for app, name in MigrationRecorder(connections[alias]).applied_migrations() if app == "awa"}
    missing = sorted(expected_migrations() - applied)
    if missing:
        option = "" if alias == "default" else f" --database {alias}"
        raise CommandError(
            f"database {_describe_database(alias)} lacks awa_django's migrations (not applied: {', '.join(missing)}; "
            f"{len(applied)} applied): run `python manage.py migrate{option}` before starting workers"
        )


def _read_queue_rows() -> list[dict[str, Any]]:
    from awa_django.models import Queue

    return [
        {
            "name": queue.name,
            "max_workers": queue.max_workers,
            "min_workers": queue.min_workers,
            "weight": queue.weight,
            "rate_limit": queue.rate_limit,
            "rate_burst": queue.rate_burst,
            "paused": queue.paused,
            "deadline_seconds": queue.deadline.total_seconds() if queue.deadline else None,
            "priority_aging_seconds": queue.priority_aging.total_seconds() if queue.priority_aging else None,
        }
        for queue in Queue.objects.using(awa_settings().DATABASE_ALIAS)
    ]
