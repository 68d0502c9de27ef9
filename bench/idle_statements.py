"""What an idle worker sends to the database: each statement's rate, for one or more checkouts.

    python bench/idle_statements.py .:awa_idle                              # this checkout
    python bench/idle_statements.py /work/wt-6353:awa_idle6353 .:awa_idle --seconds 30

Each argument is CHECKOUT:DATABASE (a migrated database of that checkout's schema, on the embedded
server of this checkout, ``.pgdata``). For each in turn: ``ALTER DATABASE ... SET
log_min_duration_statement = 0``, one ``manage.py awa_worker -q bench`` of that checkout started
on it with no job to run, and after 8 s of start-up, the server's log read for ``--seconds``; then
the setting is reset. Printed: statements a second, each statement (its first line: the SQL
files' comment names it) with its rate and its server milliseconds a second (the logged durations:
what an idle worker's side work costs the server, which a pickup meets when they coincide). Only
executions are counted (a prepared statement's parse and bind have log lines of their own).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".pgdata"
LOG = DATA / "log"  # the embedded server's stderr (testproject/embedded.py)
# One line per statement run: "statement:" (simple protocol) or "execute <name>:" (extended); a
# prepared statement's parse and bind are logged on lines of their own, not counted.
LINE = re.compile(r"LOG:  duration: ([\d.]+) ms  (?:statement|execute [^:]*): (.*)")


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"dbname=postgres host={DATA} user=postgres", autocommit=True) as conn:
        conn.execute(sql)  # a bench's own constant statements, with the database names it was given


def measure(checkout: Path, db: str, seconds: float) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Each statement's executions, and its milliseconds on the server (the logged durations)."""
    admin(f"ALTER DATABASE {db} SET log_min_duration_statement = 0")
    env = dict(os.environ, DATABASE_URL=f"postgresql://postgres@/{db}?host={DATA}", PYTHONPATH=str(checkout))
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "awa_worker", "-q", "bench"],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(8)  # the worker's start-up, not measured
        start = LOG.stat().st_size
        time.sleep(seconds)  # the measured span itself
        end = LOG.stat().st_size
    finally:
        worker.terminate()
        worker.wait(60)
        admin(f"ALTER DATABASE {db} RESET log_min_duration_statement")
    with open(LOG, "rb") as log:
        log.seek(start)
        text = log.read(end - start).decode(errors="replace")
    counts: collections.Counter[str] = collections.Counter()
    busy: collections.Counter[str] = collections.Counter()
    for match in LINE.finditer(text):
        statement = match.group(2).strip()[:100]
        counts[statement] += 1
        busy[statement] += float(match.group(1))  # type: ignore[assignment]
    return counts, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="+", help="CHECKOUT:DATABASE, one or more")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    # Stopped by a signal (timeout, Ctrl-C), still stop the worker: the finally in measure() runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not LOG.is_file():
        raise SystemExit(f"no server log at {LOG}: start the embedded server (python -m testproject.embedded url)")
    for target in args.targets:
        checkout, _, db = target.rpartition(":")
        if not checkout or not re.fullmatch(r"[a-z_][a-z0-9_]*", db):
            raise SystemExit(f"{target!r}: give CHECKOUT:DATABASE, e.g. .:awa_idle (a lower-case database name)")
        counts, busy = measure(Path(checkout).resolve(), db, args.seconds)
        print(
            f"== {checkout} {db}: {sum(counts.values()) / args.seconds:.1f} statements/s, "
            f"{sum(busy.values()) / args.seconds:.2f} ms/s on the server"
        )
        for statement, n in counts.most_common(30):
            print(f"  {n / args.seconds:6.2f}/s {busy[statement] / args.seconds:6.3f} ms/s  {statement}")


if __name__ == "__main__":
    main()
