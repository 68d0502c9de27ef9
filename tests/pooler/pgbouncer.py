"""A real PgBouncer in transaction pooling mode in front of the test Postgres (Debian's
``pgbouncer`` package; .ci/pgbouncer-deps installs it).

The start-up itself is bench/pgbouncer.py, shared with the benchmark's pooler rows; this module
only turns the test database's Django settings into its arguments. It listens on 127.0.0.1 only,
on a free port, and reaches the server over its Unix socket (or the host and port of DATABASE_URL).
Authentication is ``trust`` for the test database's user. Its log is kept so tests can assert that
nothing went wrong on the pooler's side either.
"""

from __future__ import annotations

from typing import Any

from bench.pgbouncer import PGBOUNCER, PgBouncer, free_port
from bench.pgbouncer import start as start_pgbouncer

__all__ = ["PGBOUNCER", "PgBouncer", "free_port", "start"]


def start(settings_dict: dict[str, Any], pool_size: int = 20) -> PgBouncer:
    """Start PgBouncer (transaction mode) in front of the server of ``settings_dict``; wait until it
    accepts connections. The server's host or socket directory is HOST, or the ``host`` option a
    ``DATABASE_URL`` of libpq's socket form (``postgresql://user@/name?host=/dir``) leaves in OPTIONS."""
    options = settings_dict.get("OPTIONS") or {}
    return start_pgbouncer(
        host=str(settings_dict.get("HOST") or options.get("host") or "/tmp"),
        port=str(settings_dict.get("PORT") or options.get("port") or "5432"),
        user=str(settings_dict.get("USER") or "postgres"),
        password=str(settings_dict.get("PASSWORD") or ""),
        pool_mode="transaction",
        pool_size=pool_size,
    )
