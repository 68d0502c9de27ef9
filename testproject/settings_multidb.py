"""testproject with a SQLite ``default`` and the jobs on a PostgreSQL alias ``jobs`` (tests/test_routers.py).

AWA_SQLITE_PATH: the SQLite file; AWA_JOBS_DB: the PostgreSQL database (on the same server as
testproject.settings) the jobs live in.
"""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import DATABASES as _BASE

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["AWA_SQLITE_PATH"]},
    "jobs": {**_BASE["default"], "NAME": os.environ["AWA_JOBS_DB"]},
}
DATABASE_ROUTERS = ["awa_django.routers.AwaRouter"]
AWA = {"DATABASE_ALIAS": "jobs"}

# awa.W010 says that the demo's atomic handlers (count_atomic, noop_atomic, touch_atomic, look_atomic) would
# commit writes to models on 'default' (SQLite here) on their own, and awa.W011 that they would connect per
# attempt (CONN_MAX_AGE 0): this project runs none of them, so both are silenced.
SILENCED_SYSTEM_CHECKS = ["awa.W010", "awa.W011"]
