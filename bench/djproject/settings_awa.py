"""awa_django under benchmark: the awa app plus the bench handlers (bench.djproject.awabench)."""

import os

from bench.djproject.base_settings import *  # noqa: F403
from bench.djproject.base_settings import DATABASES

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.postgres",  # awa_django's ArrayField and GinIndex (check awa.E016)
    "awa_django",
    "bench.djproject.awabench",
]

# Hard-reserved mode by default (per-queue max_workers in the awa_queue table); the weighted
# fairness run passes --global-max-workers to the worker instead.
AWA: dict[str, object] = {}

# The pooler rows (bench/run.py starts a PgBouncer in transaction mode; DATABASE_URL points at it).
# BENCH_AWA_POOLER="transaction": AWA["POOLER"], and no server-side cursors (Django's requirement
# behind a transaction pooler). BENCH_AWA_LISTEN_DATABASE_URL: the direct connection LISTEN uses;
# unset, the worker polls every POLL_INTERVAL.
if os.environ.get("BENCH_AWA_POOLER"):
    AWA["POOLER"] = os.environ["BENCH_AWA_POOLER"]
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
if os.environ.get("BENCH_AWA_LISTEN_DATABASE_URL"):
    AWA["LISTEN_DATABASE_URL"] = os.environ["BENCH_AWA_LISTEN_DATABASE_URL"]
