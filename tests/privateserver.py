"""A private PostgreSQL server, for a test that stops or restarts its server.

The tests share one server (the embedded one, or DATABASE_URL's), each test process on a database
of its own; a test that stopped or restarted that server would break every test running beside
it. Such a test builds a throwaway cluster of its own instead: initdb from the embedded server's
binaries (the test extras install them, whatever DATABASE_URL says), run as the embedded
provider's system user when we are root (initdb and postgres refuse to run as root), listening on
127.0.0.1 on a free TCP port, with its socket in its own directory. Nothing else connects to it,
so stopping or restarting it disturbs no other test.

Processes reach it through ``env()`` (DATABASE_URL set to it); the test reads it through
``rows()``/``value()`` on a session of its own, since Django's connection stays on the shared test
database.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql

from awa_django.states import JobState
from testproject import embedded
from tests.harness import ROOT
from tests.skiprule import missing_dependency

USER = "postgres"  # the cluster's superuser (initdb -U), trusted on 127.0.0.1
_ENQUEUED = "enqueued="  # the line `enqueue_many` prints, read back to check the count


def binaries_missing() -> str | None:
    """The skip reason when the embedded server's programs are not installed, else None."""
    try:
        directory = embedded.bin_dir()
    except SystemExit:  # the provider's package is not installed (or AWA_EMBEDDED_PG names none)
        name = os.environ.get("AWA_EMBEDDED_PG") or embedded.DEFAULT_PROVIDER
        return missing_dependency(
            f"the PostgreSQL programs of {name!r}, from which this test builds a private server",
            f'pip install {name} (pip install -e ".[dev]" installs {embedded.DEFAULT_PROVIDER})',
        )
    if not (directory / "initdb").exists():
        return missing_dependency(f"initdb in {directory}", 'reinstall the test extras: pip install -e ".[dev]"')
    return None


def pg_user() -> str | None:
    """The OS user the private server runs as: the embedded provider's own when we are root
    (created if needed, as the provider does on its first start), else None: ourselves."""
    return embedded.ensure_server_user()


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice of an ephemeral one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _bin(name: str) -> str:
    return str(embedded.bin_dir() / name)


def _run_as_pg_user(*command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL program as ``pg_user()``; the caller checks the code.

    Output goes to a file, not a pipe: a postmaster that pg_ctl starts inherits pg_ctl's stdout,
    and a pipe it holds would never reach end-of-file (testproject.embedded.pg_ctl does the same).
    """
    user = pg_user()
    argv = list(command) if user is None else ["su", user, "-s", "/bin/sh", "-c", shlex.join(command)]
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        out.seek(0)
        return subprocess.CompletedProcess(result.args, result.returncode, out.read())


def _as_pg_user(*command: str) -> None:
    result = _run_as_pg_user(*command)
    assert result.returncode == 0, f"{shlex.join(command)} failed: {result.stdout}"


class PrivateServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1:port with one database, ``name``; built by
    initdb here, started and stopped by the test, removed at the end."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"awa-{name}-"))
        user = pg_user()
        if user is not None:
            shutil.chown(self.dir, user, user)
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgres://{USER}@127.0.0.1:{self.port}/{name}"
        self._session: psycopg.Connection[Any] | None = None
        _as_pg_user(_bin("initdb"), "-D", str(self.data), "-U", USER, "-A", "trust", "--no-sync")

    # The server's life.

    def start(self) -> None:
        options = f"-p {self.port} -h 127.0.0.1 -k {self.dir} -c fsync=off"
        _as_pg_user(_bin("pg_ctl"), "-D", str(self.data), "-l", self.log_path, "-o", options, "-w", "start")

    def stop(self) -> None:
        self._drop_session()
        _as_pg_user(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> int:
        """Restart the running server (fast: every open session is dropped) and return the new
        postmaster's pid, checked to differ from the old one's: it really went down and came up.

        pg_ctl waits until the new server accepts connections. Without ``-o`` it starts the server
        with the previous run's options (postmaster.opts): the same port and socket directory.
        """
        before = self.postmaster_pid()
        self._drop_session()
        pg_ctl = _bin("pg_ctl")
        _as_pg_user(pg_ctl, "-D", str(self.data), "-l", self.log_path, "-m", "fast", "-w", "-t", "120", "restart")
        after = self.postmaster_pid()
        assert after != before, f"pg_ctl restart left the postmaster (pid {before}) in place"
        return after

    def postmaster_pid(self) -> int:
        """The running postmaster's pid (the first line of postmaster.pid)."""
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def remove(self) -> None:
        """Stop it whatever state a failed test left it in, and delete its files."""
        self._drop_session()
        _run_as_pg_user(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", timeout=60)  # may be down
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def log_path(self) -> str:
        return str(self.dir / "log")

    @property
    def log(self) -> str:
        """The server's log, for a failing assertion's message."""
        path = Path(self.log_path)
        return path.read_text(errors="replace") if path.exists() else ""

    # Its database.

    def create_database(self) -> None:
        with self.connect("postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))

    def connect(self, dbname: str | None = None) -> psycopg.Connection[Any]:
        """A new autocommit session on ``dbname`` (the server's database by default)."""
        return psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname=dbname or self.name, autocommit=True)

    def rows(self, query: LiteralString, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of ``query`` on the server's database, read on the test's own session: kept
        open between calls (a test polls), opened again after a restart or stop dropped it."""
        if self._session is None or self._session.closed:
            self._session = self.connect()
        return self._session.execute(query, params).fetchall()

    def value(self, query: LiteralString, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        """The one value of a one-row, one-column ``query``."""
        (row,) = self.rows(query, params)
        (value,) = row
        return value

    def _drop_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    # Processes on it.

    def env(self) -> dict[str, str]:
        """The environment of a ``manage.py`` process that must use this server's database."""
        env = {k: v for k, v in os.environ.items() if k not in ("AWA_DB_NAME", "AWA_TEST_DB")}
        env.update(DATABASE_URL=self.url, PYTHONUNBUFFERED="1")
        return env

    def manage(self, *args: str, stdin: str | None = None) -> str:
        """Run ``manage.py ARGS`` on this server's database; its stdout (it must exit 0)."""
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"manage.py {shlex.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout

    def migrate(self) -> None:
        self.manage("migrate", "-v", "0")

    def enqueue_many(self, specs: Sequence[Mapping[str, Any]]) -> None:
        """``Job.objects.enqueue_many(specs)`` in a ``manage.py shell`` on this server: the public
        API, run where it runs in production (Django's connection in this process stays on the
        shared test database). The specs go in as JSON on stdin, so they must be JSON values."""
        command = (
            "import json, sys; from awa_django.models import Job; "
            f"print({_ENQUEUED!r} + str(Job.objects.enqueue_many(json.load(sys.stdin))))"
        )
        out = self.manage("shell", "-v", "0", "-c", command, stdin=json.dumps(list(specs)))
        printed = [line for line in out.splitlines() if line.startswith(_ENQUEUED)]
        assert printed == [f"{_ENQUEUED}{len(specs)}"], out


@contextmanager
def private_server(name: str) -> Iterator[PrivateServer]:
    """A PrivateServer, initialised and not started; stopped and removed at exit. Skips the test
    (a missing dependency: tests/skiprule.py) when the embedded server's programs are missing."""
    reason = binaries_missing()
    if reason is not None:
        pytest.skip(reason)
    server = PrivateServer(name)
    try:
        yield server
    finally:
        server.remove()


@contextmanager
def migrated_server(name: str) -> Iterator[PrivateServer]:
    """A started PrivateServer whose database ``name`` has every migration applied."""
    with private_server(name) as server:
        server.start()
        server.create_database()
        server.migrate()
        yield server


# Reads of the awa tables on a private server (tests/worker/support.py has the test database's).


def state_counts(server: PrivateServer) -> dict[str, int]:
    """Jobs by state on the server's database."""
    return {state: int(n) for state, n in server.rows("SELECT state, count(*) FROM awa_job_all GROUP BY state")}


def completed_jobs(server: PrivateServer) -> int:
    return int(server.value("SELECT count(*) FROM awa_job_all WHERE state = %s", [JobState.COMPLETED.value]))
