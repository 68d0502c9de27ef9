"""The handler side effect every benchmark handler writes: one line per job start and end.

A handler calls ``start(seq, queue)`` first thing and ``end(seq, queue)`` last. Each call
appends one line ``<S|E> <seq> <queue> <time.time()> <pid>`` to the file named by the
``BENCH_HANDLER_LOG`` environment variable, with a single ``os.write`` on an ``O_APPEND``
descriptor, so lines from many worker processes and threads never interleave. The harness
reads the file to time pickup latency (handler start), to rebuild the running counts of the
fairness run, and to check that every job ran exactly once (the seqs are loaded into the
database and counted there, so a duplicate execution is caught).

Stdlib only: it is imported by every system's worker, in every virtualenv.
"""

from __future__ import annotations

import os
import time

_fd: int | None = None
_pid = 0


def _descriptor() -> int | None:
    global _fd, _pid
    pid = os.getpid()
    if _fd is None or _pid != pid:  # after a fork, open our own descriptor
        path = os.environ.get("BENCH_HANDLER_LOG")
        if not path:
            return None
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _pid = pid
    return _fd


def _write(event: str, seq: object, queue: object) -> None:
    fd = _descriptor()
    if fd is not None:
        os.write(fd, f"{event} {int(seq)} {queue or '-'} {time.time():.6f} {os.getpid()}\n".encode())


def start(seq: object, queue: object = "-") -> None:
    _write("S", seq, queue)


def end(seq: object, queue: object = "-") -> None:
    _write("E", seq, queue)


def read(path: str, offset: int = 0) -> tuple[list[tuple[str, int, str, float, int]], int]:
    """Parse the complete lines from ``offset``; return them and the offset after the last one."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end_at = data.rfind(b"\n") + 1
    events = []
    for line in data[:end_at].decode().splitlines():
        ev, seq, queue, t, pid = line.split(" ")
        events.append((ev, int(seq), queue, float(t), int(pid)))
    return events, offset + end_at
