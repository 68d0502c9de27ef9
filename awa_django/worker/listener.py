"""Wake-ups: the LISTEN connection that turns NOTIFYs into nudges, and the backlog probe, its backstop.

An idle queue runner issues no query; it is woken by a NOTIFY for its queue (``Listener``) or by
the ``BacklogProbe``, which looks at every idle queue together once per poll interval (and at once
after the LISTEN connection (re)connects, when notifications may have been missed). A NOTIFY on
the queues channel asks for the queue settings to be re-read; one on the cancel channel tells a
running job's handler to stop; one on the freed-keys channel says an attempt of a capped fair key
ended (worker/keyed.py), so a queue whose claims that key's cap held back claims again. They reach
the queues through ``Runtime.runners``, by name; what the probe's answer means for a queue is its
backlog belief's to decide (``Backlog.verdict``), and so is the look owed to a queue that was in
its own poll when a look was asked for (``Backlog.look_requested``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from awa_django import defaults
from awa_django.sql import (
    CANCEL_CHANNEL,
    FREED_KEYS_CHANNEL,
    JOBS_CHANNEL,
    LISTEN_PING_CHANNEL,
    QUEUES_CHANNEL,
    statements,
)
from awa_django.worker.backlog import Backlog
from awa_django.worker.config import WorkerConfig
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff, connect
from awa_django.worker.keyed import parse_freed
from awa_django.worker.runtime import Runtime

logger = logging.getLogger(__name__)


class ListenerStalledError(Exception):
    """The LISTEN connection stopped answering its health check (dead or half-open)."""


LISTEN_LOST: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, ListenerStalledError)


def listen_check_interval(config: WorkerConfig) -> float:
    """How often the LISTEN connection proves it works (a self-NOTIFY round trip); a check not
    answered within one interval means the connection is dead or half-open."""
    return max(0.2, min(config.heartbeat_interval, defaults.SNAPSHOT_INTERVAL_MAX))


class BacklogProbe:
    """The backstop to NOTIFY, one query per poll interval for every queue together."""

    # How often to check, while a look is owed to a queue still in the poll it was in when the
    # look was asked for, whether that poll has ended (a claim takes milliseconds).
    OWED_RECHECK = 0.005  # seconds

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.now = asyncio.Event()  # set: probe at once instead of at the end of the interval
        # The queues whose own poll was under way when a look was last asked for: where a debt may
        # be (``Backlog.owed``, the queue's own to keep), so that only they are checked while the
        # probe rests, not every runner.
        self._asked: set[str] = set()

    def look_now(self) -> None:
        """Look at every queue at once (the listener may have missed NOTIFYs). A queue whose own
        poll is under way is owed a look after it (``Backlog.look_requested``)."""
        for name, runner in self.runtime.runners.items():
            backlog = runner.backlog
            backlog.look_requested()
            if backlog.owed:
                self._asked.add(name)
        self.now.set()

    def _owed(self) -> list[Backlog]:
        """The backlogs still owed a look (forgetting the queues that no longer are)."""
        runners = self.runtime.runners
        owed = [runners[name].backlog for name in self._asked if runners[name].backlog.owed]
        if len(owed) < len(self._asked):
            self._asked = {name for name in self._asked if runners[name].backlog.owed}
        return owed

    async def _rest(self, *, failed: bool = False) -> None:
        """Until the next look: the poll interval, or sooner when asked to look now (at once if
        that was asked while the last look ran), or when a queue owed a look ends its poll. After
        a failed look, only the interval or a request (the listener back) ends it."""
        runtime = self.runtime
        loop = asyncio.get_running_loop()
        deadline = loop.time() + runtime.config.poll_interval
        while not runtime.stop.stopping:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            owed = bool(self._asked) and not failed
            await self._wait_for_request(min(remaining, self.OWED_RECHECK) if owed else remaining)
            if self.now.is_set():
                break
            if owed and any(backlog.owes_look for backlog in self._owed()):
                break  # a poll it was owed for ended: look at its queue now
        self.now.clear()

    async def _wait_for_request(self, seconds: float) -> None:
        """Until asked to look now, or ``seconds``, or the worker stopping."""
        await self.runtime.stop.sleep_unless(self.now, seconds)

    def params(self, queues: list[str]) -> dict[str, list[Any]]:
        """find_ready_queues' parameters: every lane of each queue, from its runner's cursor
        (jobs behind the cursors are the look-behind's, worker/lookbehind.py)."""
        runners = self.runtime.runners
        params: dict[str, list[Any]] = {"queues": [], "lanes": [], "after_run_at": [], "after_id": []}
        for name in queues:
            for priority, key in enumerate(runners[name].lane_cursors, start=1):
                params["queues"].append(name)
                params["lanes"].append(priority)
                params["after_run_at"].append(None if key is None else key[0])
                params["after_id"].append(None if key is None else key[1])
        return params

    async def run(self) -> None:
        """Tell each idle queue's runner whether its queue has due jobs (a missed or absent NOTIFY,
        a promoted scheduled job; or none, when another worker took the jobs a NOTIFY announced),
        so that none waits nor contends by mistake. The first probe runs at once: it is how the
        runners learn of jobs waiting at start."""
        runtime = self.runtime
        runners, stop = runtime.runners, runtime.stop
        while not stop.stopping:
            seen = runners.probe_candidates()
            if not seen:
                # Every queue is paused or in its own claim, which looks at the database itself
                # (a claim that was under way when a look was asked for is looked after it ends).
                await self._rest()
                continue
            try:
                async with runtime.pool.connection() as conn:
                    cursor = await conn.execute(statements["find_ready_queues"], self.params(list(seen)))
                    ready = {row[0] for row in await cursor.fetchall()}
            except TRANSIENT_ERRORS as exc:
                # Again after the interval, or once the listener reconnects (the database is back).
                logger.warning("backlog probe failed: %r; retrying next interval", exc)
                await self._rest(failed=True)
                continue
            for name, token in seen.items():
                runner = runners.get(name)
                if runner is not None:
                    runner.backlog_verdict(name in ready, token)
            runners.wake_waiting()
            await self._rest()


class Listener:
    """LISTEN for wake-ups; ``listening`` is true only while the connection proves it works."""

    def __init__(self, runtime: Runtime, probe: BacklogProbe, reconfigure_soon: Callable[[], None]) -> None:
        self.runtime = runtime
        self.probe = probe
        self.reconfigure_soon = reconfigure_soon  # the queue settings changed: re-read them now
        self.listening = False

    async def run(self) -> None:
        """LISTEN for wake-ups; on any connection loss reconnect with backoff and wake everyone.

        A connection can die without a word (a half-open TCP connection, a stopped backend): then
        no error ever comes, only silence. So the connection NOTIFYs itself every check interval and
        must hear the echo before the next check; ``listening`` is true only while it does."""
        runtime = self.runtime
        config, stop = runtime.config, runtime.stop
        if not config.listen:
            logger.warning(
                "LISTEN is off (AWA['LISTEN']=False, or AWA['POOLER']='transaction' without "
                "AWA['LISTEN_DATABASE_URL']): probing for jobs every %.2fs",
                config.poll_interval,
            )
            return
        backoff = Backoff()
        while not stop.stopping:
            try:
                conn = await connect(config.database_alias, purpose="listen")
            except TRANSIENT_ERRORS as exc:
                delay = backoff.next()
                logger.warning("LISTEN connection failed, retrying in %.2fs error=%r", delay, exc)
                await stop.sleep(delay)
                continue
            try:
                async with conn:
                    try:
                        channels = (
                            JOBS_CHANNEL,
                            QUEUES_CHANNEL,
                            CANCEL_CHANNEL,
                            FREED_KEYS_CHANNEL,
                            LISTEN_PING_CHANNEL,
                        )
                        for channel in channels:
                            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    except psycopg.errors.FeatureNotSupported as exc:
                        logger.warning(
                            "LISTEN is not available (%s): polling every %.2fs",
                            exc,
                            config.poll_interval,
                        )
                        return
                    self.listening = True
                    backoff.reset()
                    self.probe.look_now()  # we may have missed notifications: look at every queue
                    await self._receive(conn)
            except LISTEN_LOST as exc:
                self.listening = False
                delay = backoff.next()
                logger.warning("LISTEN connection lost, reconnecting in %.2fs error=%r", delay, exc)
                await stop.sleep(delay)
            finally:
                self.listening = False

    async def _receive(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Handle notifications; every interval, check the previous self-NOTIFY came back and send
        the next one. Raises ListenerStalledError when the connection stopped answering."""
        interval = listen_check_interval(self.runtime.config)
        waiting_for: str | None = None
        while not self.runtime.stop.stopping:
            async for notify in conn.notifies(timeout=interval):
                if notify.channel == LISTEN_PING_CHANNEL:
                    if notify.payload == waiting_for:
                        waiting_for = None
                    continue
                self.on_notify(notify.channel, notify.payload)
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

    def on_notify(self, channel: str, payload: str) -> None:
        logger.debug("notified channel=%s payload=%s", channel, payload)
        runners = self.runtime.runners
        if channel == JOBS_CHANNEL:
            runner = runners.get(payload)
            if runner is not None:
                runner.nudge()
        elif channel == QUEUES_CHANNEL:
            self.reconfigure_soon()
        elif channel == FREED_KEYS_CHANNEL:
            freed = parse_freed(payload)
            runner = None if freed is None else runners.get(freed[0])
            if freed is not None and runner is not None:
                runner.key_freed(freed[1])
        elif channel == CANCEL_CHANNEL:
            with contextlib.suppress(ValueError):
                entry = self.runtime.attempts.in_flight.get(int(payload))
                if entry is not None:
                    logger.info("job cancelled while running job_id=%s; telling its handler", payload)
                    entry.context.cancel()
