"""A real PgBouncer in transaction pooling mode in front of the test Postgres (Debian's
``pgbouncer`` package; .ci/pgbouncer-deps installs it).

It listens on 127.0.0.1 only, on a free port, and reaches the server over its Unix socket (or the
host and port of DATABASE_URL). Authentication is ``trust`` for the test database's user. Its log
is kept so tests can assert that nothing went wrong on the pooler's side either.
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
from typing import Any

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)


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
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


def start(settings_dict: dict[str, Any], pool_size: int = 20) -> PgBouncer:
    """Start PgBouncer (transaction mode) in front of the server of ``settings_dict``; wait until it
    accepts connections."""
    assert PGBOUNCER is not None
    host = str(settings_dict.get("HOST") or "/tmp")
    port = str(settings_dict.get("PORT") or "5432")
    user = str(settings_dict.get("USER") or "postgres")
    password = str(settings_dict.get("PASSWORD") or "")
    directory = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
    listen_port = free_port()
    # PgBouncer refuses to run as root; then it runs as the owner of the server's socket directory
    # (the embedded server's user), which can reach the socket.
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
                "pool_mode = transaction",
                f"default_pool_size = {pool_size}",
                "max_client_conn = 1000",
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
    command = [PGBOUNCER, str(directory / "pgbouncer.ini")]
    if run_as is not None:
        command[1:1] = ["-u", run_as]
    # Its console output goes to a file: a pipe nobody reads fills up and PgBouncer stops, mid-query.
    console = open(directory / "console.log", "wb")
    process = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT)
    console.close()
    bouncer = PgBouncer(process, listen_port, directory, user)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            output = (directory / "console.log").read_text(errors="replace")
            raise RuntimeError(f"pgbouncer exited ({process.returncode}): {output}\n{bouncer.log}")
        try:
            with socket.create_connection(("127.0.0.1", listen_port), timeout=1):
                return bouncer
        except OSError:
            if time.monotonic() > deadline:
                bouncer.stop()
                raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{listen_port} within 30s") from None
            time.sleep(0.05)
