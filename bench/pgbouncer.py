"""A real PgBouncer, started on a free port of 127.0.0.1 in front of one PostgreSQL server.

Stdlib only: bench/run.py (any interpreter, no venv) starts it for the rows measured through a
transaction pooler, and tests/pooler (through its thin wrapper, tests/pooler/pgbouncer.py) for the
tests behind one. It lives in bench/ rather than tests/ so that the benchmark does not depend on the
test tree (pytest, conftest), and not in awa_django/ because the product never starts a pooler.

The binary is Debian's ``pgbouncer`` package (``bash .ci/pgbouncer-deps`` installs it). PgBouncer
reaches the server over its Unix socket or its host and port; clients authenticate with ``trust``
(it only listens on 127.0.0.1). Its log is kept so callers can look for errors on the pooler's
side too. The caller owns the process: ``stop()`` it in a ``finally`` (bench/run.py also registers
it with atexit).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

POOL_MODES = ("session", "transaction", "statement")
INSTALL_HINT = "install it with `bash .ci/pgbouncer-deps` (Debian's package: `apt-get install pgbouncer`)"


def find_binary() -> str | None:
    """The pgbouncer executable: on PATH, or where Debian puts it (/usr/sbin, often not on PATH)."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


PGBOUNCER = find_binary()


class PgBouncerMissingError(RuntimeError):
    """No pgbouncer executable on this machine; the message names the fix."""

    def __init__(self) -> None:
        super().__init__(f"pgbouncer is not installed (not on PATH, not /usr/sbin/pgbouncer): {INSTALL_HINT}")


def require_binary() -> str:
    """The pgbouncer executable, or PgBouncerMissingError saying how to install it."""
    binary = find_binary()
    if binary is None:
        raise PgBouncerMissingError()
    return binary


def version() -> str:
    """``pgbouncer --version``'s first line, e.g. "PgBouncer 1.25.1"."""
    done = subprocess.run([require_binary(), "--version"], capture_output=True, text=True, timeout=30, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "?"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PgBouncer:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path
    user: str

    @property
    def log_path(self) -> Path:
        return self.directory / "pgbouncer.log"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def url(self, dbname: str) -> str:
        """A libpq URL of ``dbname`` through this PgBouncer (no password: client auth is trust)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Terminate PgBouncer (SIGTERM, then SIGKILL after 10 s) and remove its directory. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


def start(
    host: str,
    port: int | str,
    user: str,
    password: str = "",
    *,
    pool_mode: str = "transaction",
    pool_size: int = 20,
    admin: bool = False,
) -> PgBouncer:
    """Start PgBouncer in front of the server at ``host``/``port`` (a Unix socket directory or a TCP
    host); wait until it accepts connections on 127.0.0.1.

    ``user``/``password`` are the server role every pooled connection logs in as. ``admin`` makes
    ``user`` an admin of the console (database ``pgbouncer``: ``SHOW STATS``).
    """
    if pool_mode not in POOL_MODES:
        raise ValueError(f"pool_mode {pool_mode!r} is not one of {', '.join(POOL_MODES)}")
    if pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, not {pool_size}")
    binary = require_binary()
    host = host or "/tmp"  # libpq's default socket directory when no host is given
    directory = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
    listen_port = free_port()
    # PgBouncer refuses to run as root; then it runs as the owner of the server's socket directory
    # (which can reach the socket), or as nobody for a TCP server.
    run_as: str | None = None
    if os.geteuid() == 0:
        owner = Path(host).stat().st_uid if host.startswith("/") else 65534
        run_as = pwd.getpwuid(owner).pw_name
    server = f"host={host} port={port}" + (f" password={password}" if password else "")
    (directory / "users.txt").write_text(f'"{user}" "{password}"\n')
    (directory / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"* = {server}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {listen_port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {directory / 'users.txt'}",
                f"pool_mode = {pool_mode}",
                f"default_pool_size = {pool_size}",
                "max_client_conn = 1000",
                *([f"admin_users = {user}"] if admin else []),
                # psycopg sends none of these, but libpq-based tools do; never a reason to refuse.
                "ignore_startup_parameters = extra_float_digits,options",
                f"logfile = {directory / 'pgbouncer.log'}",
                f"pidfile = {directory / 'pgbouncer.pid'}",
                "",
            ]
        )
    )
    directory.chmod(0o777)
    for path in directory.iterdir():
        path.chmod(0o644)
    command = [binary, str(directory / "pgbouncer.ini")]
    if run_as is not None:
        command[1:1] = ["-u", run_as]
    # Its console output goes to a file: a pipe nobody reads fills up and PgBouncer stops, mid-query.
    with open(directory / "console.log", "wb") as console:
        process = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    bouncer = PgBouncer(process, listen_port, directory, user)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            output = (directory / "console.log").read_text(errors="replace")
            log = bouncer.log
            bouncer.stop()
            raise RuntimeError(f"pgbouncer exited ({process.returncode}): {output}\n{log}")
        try:
            with socket.create_connection(("127.0.0.1", listen_port), timeout=1):
                return bouncer
        except OSError:
            if time.monotonic() > deadline:
                bouncer.stop()
                raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{listen_port} within 30s") from None
            time.sleep(0.05)
