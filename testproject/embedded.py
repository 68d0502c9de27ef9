"""An embedded PostgreSQL for testproject, used when DATABASE_URL is unset.

The server comes from the pip-installable ``pgserver`` package, keeps its data in
``<checkout>/.pgdata`` (git-ignored) and listens on a Unix socket only. It is started on
demand and left running, like any local database, so the worker, the tests and the
benchmarks share it; ``python -m testproject.embedded stop`` stops it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / ".pgdata"
DATABASE_NAME = "awa"


def _server() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        try:
            import pgserver
        except ImportError as exc:  # pragma: no cover - a setup problem, said plainly
            raise SystemExit(
                "DATABASE_URL is unset and the embedded PostgreSQL package is missing: "
                'run `pip install -e ".[dev]"` (or set DATABASE_URL to a PostgreSQL database)'
            ) from exc
        return pgserver.get_server(DATA_DIR, cleanup_mode=None)  # type: ignore[attr-defined]


def socket_dir() -> str:
    """Start the server if needed, make sure the project database exists, return the socket dir."""
    server = _server()
    host = server.get_postmaster_info().socket_dir
    # DATABASE_NAME is a constant of this module, not input.
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")  # noqa: S608
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    return str(host)


def database_settings() -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE_NAME,
        "USER": "postgres",
        "HOST": socket_dir(),
        "PORT": "",
    }


def stop() -> None:
    server = _server()
    server.cleanup_mode = "stop"
    server.cleanup()


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "start"
    if command == "stop":
        stop()
    elif command == "start":
        print(socket_dir())
    else:
        raise SystemExit(f"unknown command {command!r}; use `start` or `stop`")
