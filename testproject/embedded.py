"""An embedded PostgreSQL for testproject, used when DATABASE_URL is unset.

The server comes from the pip-installable ``pgserver`` package, keeps its data in
``<checkout>/.pgdata`` (git-ignored; ``AWA_PGDATA`` names another directory) and listens on a
Unix socket only. Nothing starts it at import: the ``testproject.embedded_postgresql`` database
backend starts it when Django first opens a connection, and leaves it running, like any local
database, so the worker, the tests and the benchmarks share it.

    python -m testproject.embedded start   # start it (if needed) and print its socket directory
    python -m testproject.embedded url     # start it (if needed) and print a DATABASE_URL for it
    python -m testproject.embedded status  # "running (…)" or "not running"; starts nothing
    python -m testproject.embedded stop    # "stopped" or "not running"

``stop`` stops the server whoever else has it open. pgserver itself stops a server only when
the last process that opened it exits, and counts those processes in ``.handle_pids.json``; a
process that is killed (a test's worker subprocess) never takes its pid out of that list, so
pgserver's own cleanup never sees itself as the last one. ``stop`` therefore asks ``pg_ctl``
directly and empties the list. When run as root, pgserver runs the server as a ``pgserver``
system user, which it creates on first use.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATA_DIR = Path(os.environ.get("AWA_PGDATA") or Path(__file__).resolve().parent.parent / ".pgdata")
DATABASE_NAME = "awa"
USER = "postgres"
SYSTEM_USER = "pgserver"  # the OS user pgserver runs the server as, when started by root
_HANDLE_PIDS = ".handle_pids.json"
_checked: set[Path] = set()  # data directories whose project database this process has seen


def _import_pgserver() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        try:
            import pgserver
        except ImportError as exc:  # a setup problem, said plainly
            raise SystemExit(
                "DATABASE_URL is unset and the embedded PostgreSQL package is missing: "
                'run `pip install -e ".[dev]"` (or set DATABASE_URL to a PostgreSQL database)'
            ) from exc
    return pgserver


def _postmaster(data_dir: Path) -> Any:
    """pgserver's reading of ``postmaster.pid`` if a server is running on ``data_dir``, else None."""
    _import_pgserver()
    from pgserver.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(data_dir)
    except (OSError, ValueError, AssertionError):  # a half-written postmaster.pid: not (yet) running
        return None
    return info if info is not None and info.is_running() and info.status == "ready" else None


def socket_dir(data_dir: Path = DATA_DIR) -> str:
    """Start the server if needed, make sure the project database exists, return the socket dir."""
    pgserver = _import_pgserver()
    info = _postmaster(data_dir)
    if info is None:
        # get_server runs initdb on first use and pg_ctl start, under pgserver's inter-process
        # lock, so two processes starting together start one server. cleanup_mode=None: this
        # process leaves it running when it exits.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = pgserver.get_server(data_dir, cleanup_mode=None).get_postmaster_info()
    host = str(info.socket_dir)
    if data_dir not in _checked:
        _ensure_database(host)
        _checked.add(data_dir)
    return host


def _ensure_database(host: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dbname="postgres", user=USER, host=host, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone() is None:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE_NAME)))
            except psycopg.errors.DuplicateDatabase:  # another process created it just now
                pass


def database_settings() -> dict[str, Any]:
    """``DATABASES['default']`` for the embedded server. Starts nothing: the backend does, on connect."""
    return {
        "ENGINE": "testproject.embedded_postgresql",
        "NAME": DATABASE_NAME,
        "USER": USER,
        "HOST": "",  # filled in by the backend with the server's socket directory
        "PORT": "",
    }


def database_url(data_dir: Path = DATA_DIR) -> str:
    """A ``DATABASE_URL`` for the project database on the embedded server (started if needed)."""
    # libpq's form for a Unix socket: the directory as the host parameter (psql takes it too).
    return f"postgresql://{USER}@/{DATABASE_NAME}?host={quote(socket_dir(data_dir), safe='/')}"


def status(data_dir: Path = DATA_DIR) -> str:
    info = _postmaster(data_dir)
    if info is None:
        return "not running"
    return f"running (pid {info.pid}, socket directory {info.socket_dir}, data {data_dir})"


def stop(data_dir: Path = DATA_DIR) -> str:
    """Stop the server on ``data_dir`` (fast shutdown: open sessions are disconnected).

    Returns "stopped" or "not running"; raises SystemExit naming the log when pg_ctl fails.
    """
    info = _postmaster(data_dir)
    handles = data_dir / _HANDLE_PIDS
    if info is None:
        handles.unlink(missing_ok=True)  # stale pids of processes that are gone
        return "not running"
    _import_pgserver()
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # (set at import, per binary)

    as_root = platform.system() != "Windows" and os.geteuid() == 0
    try:
        pg_ctl(["-w", "-t", "60", "-m", "fast", "stop"], pgdata=data_dir, user=SYSTEM_USER if as_root else None)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise SystemExit(
            f"could not stop the embedded PostgreSQL (pid {info.pid}, data {data_dir}): {exc}; "
            f"see its log {data_dir / 'log'}, or stop it with `kill {info.pid}`"
        ) from None
    handles.unlink(missing_ok=True)  # nobody holds it now; a stale list would confuse pgserver later
    return "stopped"


def main(argv: list[str]) -> int:
    commands = ("start", "stop", "status", "url")
    command = argv[0] if argv else "start"
    if len(argv) > 1 or command not in commands:
        print(f"unknown command {' '.join(argv)!r}; use one of: {', '.join(commands)}", file=sys.stderr)
        return 2
    if command == "stop":
        print(stop())
    elif command == "status":
        print(status())
    elif command == "url":
        print(database_url())
    else:
        print(socket_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
