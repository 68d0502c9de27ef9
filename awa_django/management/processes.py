"""``awa_worker --processes N``: one command, N worker processes on one host, kept running.

The parent runs no jobs and holds no database connection. It starts N children, each the same
command line with ``--process-index I`` added, and then only watches them:

- a child that exits while the parent is not stopping is started again, after a pause that
  doubles (0.5 s to 30 s) while children keep dying within 10 s of their start, so a broken
  deployment logs one line per restart instead of spinning;
- a child whose parent dies (even by SIGKILL) is sent SIGTERM and stops as on any SIGTERM;
- SIGTERM/SIGINT to the parent go to every child, which stop as one worker does (a second signal
  stops them at once); the parent exits once every child has, with status 0 only if every child
  exited 0.

Each child takes its part of the host's capacity (``awa_django.concurrency.share``) in capacity
scope "process", and serves metrics and probes on the given ports plus its index.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

logger = logging.getLogger("awa_django.worker.processes")

RESTART_PAUSE_MIN = 0.5
RESTART_PAUSE_MAX = 30.0
QUICK_DEATH = 10.0  # a child that dies sooner than this after its start doubles the next pause


PR_SET_PDEATHSIG = 1
PARENT_ENV = "AWA_PROCESSES_PARENT"  # the parent's pid, as its children see it


def follow_parent() -> None:
    """In a child: be sent SIGTERM (a graceful stop) when the parent dies, however it dies (Linux;
    elsewhere a child outlives a killed parent until it is stopped itself)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit() and os.getppid() != int(parent):  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def child_command(argv: Sequence[str], index: int) -> list[str]:
    """The command line of child ``index``: this process's own, plus ``--process-index``."""
    return [sys.executable, *argv, "--process-index", str(index)]


class Children:
    """The parent's side: start, restart and stop the N children."""

    def __init__(self, argv: Sequence[str], count: int) -> None:
        self.argv = list(argv)
        self.count = count
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.started_at: dict[int, float] = {}
        self.pause: dict[int, float] = {}
        self.signals = 0
        self.wake = threading.Event()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.wake.set()
        for proc in list(self.procs.values()):
            if proc.poll() is None:
                try:
                    proc.send_signal(signum)
                except ProcessLookupError:  # exited between the poll and the signal
                    pass

    def start(self, index: int) -> None:
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        proc = subprocess.Popen(child_command(self.argv, index), env=env)  # noqa: S603 - this process's own argv
        self.procs[index] = proc
        self.started_at[index] = time.monotonic()
        logger.info("worker process started index=%s pid=%s", index, proc.pid)

    def run(self) -> int:
        """Until a signal stops the children and they have all exited; the exit status."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        statuses: dict[int, int] = {}
        try:
            for index in range(self.count):
                self.start(index)
            logger.info(
                "%d worker processes running pids=%s",
                self.count,
                ",".join(str(p.pid) for p in self.procs.values()),
            )
            while self.procs:
                pid, status = os.wait()
                which = next((i for i, p in self.procs.items() if p.pid == pid), None)
                if which is None:
                    continue  # not one of ours
                proc = self.procs.pop(which)
                code = proc.returncode = os.waitstatus_to_exitcode(status)
                if self.signals:
                    statuses[which] = code
                    logger.info("worker process stopped index=%s pid=%s status=%s", which, pid, code)
                    continue
                self._restart(which, pid, code)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0 if statuses and all(code == 0 for code in statuses.values()) else 1

    def _restart(self, index: int, pid: int, code: int) -> None:
        lived = time.monotonic() - self.started_at[index]
        pause = self.pause.get(index, 0.0)
        pause = min(max(pause * 2, RESTART_PAUSE_MIN), RESTART_PAUSE_MAX) if lived < QUICK_DEATH else RESTART_PAUSE_MIN
        self.pause[index] = pause
        logger.warning(
            "worker process exited index=%s pid=%s status=%s after %.1fs; starting it again in %.1fs "
            "(its running jobs are rescued once their heartbeat is stale)",
            index,
            pid,
            code,
            lived,
            pause,
        )
        self.wake.clear()
        if self.wake.wait(pause) or self.signals:  # a stop signal during the pause: no restart
            return
        self.start(index)
