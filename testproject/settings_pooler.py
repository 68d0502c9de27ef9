"""testproject behind PgBouncer in transaction mode (the tests in tests/pooler start it).

AWA_PGBOUNCER_PORT: the port PgBouncer listens on (127.0.0.1). AWA_LISTEN_DATABASE_URL, when set,
is the direct connection the worker LISTENs on. AWA_POOLER="" leaves AWA["POOLER"] unset (to see
what happens, and what the checks say, when the settings do not mention the pooler).
"""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import AWA, DATABASES

DATABASES["default"].update(
    {
        "HOST": "127.0.0.1",
        "PORT": os.environ["AWA_PGBOUNCER_PORT"],
        "DISABLE_SERVER_SIDE_CURSORS": True,
    }
)

if os.environ.get("AWA_POOLER", "transaction"):
    AWA["POOLER"] = os.environ.get("AWA_POOLER", "transaction")
if os.environ.get("AWA_LISTEN_DATABASE_URL"):
    AWA["LISTEN_DATABASE_URL"] = os.environ["AWA_LISTEN_DATABASE_URL"]
