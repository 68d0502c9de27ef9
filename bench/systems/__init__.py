"""The systems under test: one adapter module each, with the same small interface (base.System).

This file is stdlib-only: the runner reads it (to build each system's virtualenv) without
importing any adapter. An adapter module is only imported inside its own virtualenv, by
bench/driver.py.
"""

from __future__ import annotations

# name -> (adapter module, pip requirements of its virtualenv, description)
# Versions are pinned so that runs on different days compare the same code; bump them on purpose.
SYSTEMS: dict[str, dict[str, object]] = {
    "awa_django": {
        "module": "bench.systems.awa_django",
        # awa_django itself is not installed: the checkout is put on PYTHONPATH, and its declared
        # dependencies (pyproject.toml [project].dependencies) are added to these at venv build time.
        # prometheus-client: the drain_metrics row (awa_worker --metrics prometheus).
        "requirements": ["Django>=5.2,<6.0", "prometheus-client>=0.20"],
        "from_checkout": True,
        "title": "awa_django",
        # Has the pooler rows (bench/run.py call_pooled): AWA["POOLER"] = "transaction" behind PgBouncer.
        "pooler": True,
    },
    "procrastinate": {
        "module": "bench.systems.procrastinate",
        "requirements": ["procrastinate==3.10.0"],
        "title": "procrastinate",
    },
    "pgqueuer": {
        "module": "bench.systems.pgqueuer",
        "requirements": ["pgqueuer==1.6.0", "asyncpg"],
        "title": "pgqueuer",
    },
    "awa_pg": {
        "module": "bench.systems.awa_pg",
        "requirements": ["awa-pg==0.6.9"],
        "title": "awa (awa-pg)",
    },
    "django_tasks_db": {
        "module": "bench.systems.django_tasks_db",
        # Django 5.2 has no django.tasks: the [compat] extra brings the django-tasks backport.
        "requirements": ["django-tasks-db[compat]==0.13.0", "Django>=5.2,<6.0"],
        "title": "django-tasks-db",
    },
}

# Every venv also gets psycopg: the harness's own SQL (counting, verification) uses it.
COMMON_REQUIREMENTS = ["psycopg[binary,pool]>=3.2"]

ORDER = ["awa_django", "procrastinate", "pgqueuer", "awa_pg", "django_tasks_db"]
