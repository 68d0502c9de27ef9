"""AwaRouter and the routing checks; and a project whose ``default`` is SQLite with the jobs on a
PostgreSQL alias, run end to end in subprocesses (check, migrate, enqueue, a worker, the admin)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings

from awa_django.checks import check_routing
from awa_django.models import Job
from awa_django.routers import AwaRouter
from tests.conftest import connect_outside_django
from tests.harness import ROOT

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")

ROUTER = "awa_django.routers.AwaRouter"


def with_jobs_alias() -> dict[str, Any]:
    return {**settings.DATABASES, "jobs": dict(settings.DATABASES["default"])}


@override_settings(DATABASES=with_jobs_alias(), AWA={"DATABASE_ALIAS": "jobs"})
def test_router__sends_the_awa_app_to_the_jobs_alias_and_nothing_else() -> None:
    router = AwaRouter()
    assert router.db_for_read(Job) == "jobs"
    assert router.db_for_write(Job) == "jobs"
    assert router.db_for_read(User) is None
    assert router.allow_migrate("jobs", "awa") is True
    assert router.allow_migrate("default", "awa") is False
    assert router.allow_migrate("default", "auth") is None


def test_router__follows_the_setting_at_each_call() -> None:
    router = AwaRouter()
    assert router.db_for_write(Job) == "default"
    with override_settings(DATABASES={**with_jobs_alias(), "other": {}}, AWA={"DATABASE_ALIAS": "other"}):
        assert router.db_for_write(Job) == "other"


def test_router__relations() -> None:
    router = AwaRouter()
    a, b, user = Job(), Job(), User()
    a._state.db, b._state.db, user._state.db = "jobs", "jobs", "default"
    assert router.allow_relation(a, b) is True
    assert router.allow_relation(a, user) is False
    user._state.db = "jobs"
    assert router.allow_relation(a, user) is True
    assert router.allow_relation(user, User()) is None


def test_check_routing__jobs_on_another_alias_without_the_router__e011_and_w003() -> None:
    with override_settings(DATABASES=with_jobs_alias(), AWA={"DATABASE_ALIAS": "jobs"}, DATABASE_ROUTERS=[]):
        messages = check_routing()

    assert [m.id for m in messages] == ["awa.E011", "awa.W003"]
    assert "'default'" in messages[0].msg and "'jobs'" in messages[0].msg
    assert ROUTER in str(messages[0].hint)
    assert "migrate --database default" in messages[1].msg


def test_check_routing__with_the_router__clean() -> None:
    with override_settings(DATABASES=with_jobs_alias(), AWA={"DATABASE_ALIAS": "jobs"}, DATABASE_ROUTERS=[ROUTER]):
        assert check_routing() == []


def test_check_routing__one_database__nothing_to_say() -> None:
    assert check_routing() == []


# --- a SQLite default and the jobs on PostgreSQL, in subprocesses -----------------------------------

SCRIPT = """
import json
from django.contrib.auth.models import User
from django.test import Client
from awa_django.models import Job

job = Job.objects.enqueue("noop", queue="multi")
many = Job.objects.enqueue_many([{"kind": "noop", "queue": "multi"} for _ in range(5)])
User.objects.create_superuser("admin", "admin@example.com", "pw")
client = Client()
client.force_login(User.objects.get(username="admin"))
listing = client.get("/admin/awa/job/?queue=multi")
detail = client.get(f"/admin/awa/job/{job.pk}/change/")
print("RESULT " + json.dumps({
    "job": job.pk, "db": job._state.db, "many": many,
    "listing": listing.status_code, "listed": f"/admin/awa/job/{job.pk}/change/" in listing.content.decode(),
    "detail": detail.status_code,
    "count": Job.objects.filter(queue="multi").count(),
}))
"""


@pytest.fixture
def jobs_database(transactional_db: None) -> Iterator[str]:
    name = f"awa_multidb_{uuid.uuid4().hex[:8]}"
    with connect_outside_django() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with connect_outside_django() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_sqlite_default__jobs_on_postgres__check_migrate_enqueue_worker_admin(
    tmp_path: Path, jobs_database: str
) -> None:
    # DATABASE_URL stays: the jobs database was made on that server (or on the embedded one).
    env = {k: v for k, v in os.environ.items() if k != "AWA_DB_NAME"}
    env.update(DJANGO_SETTINGS_MODULE="testproject.settings_multidb", AWA_SQLITE_PATH=str(tmp_path / "app.sqlite3"),
               AWA_JOBS_DB=jobs_database, PYTHONUNBUFFERED="1")  # fmt: skip

    checked = manage(env, "check", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stderr
    for alias in ("default", "jobs"):
        migrated = manage(env, "migrate", "--database", alias, "-v", "0")
        assert migrated.returncode == 0, migrated.stderr
    with sqlite3.connect(tmp_path / "app.sqlite3") as lite:
        names = {row[0] for row in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "auth_user" in names
    assert not {n for n in names if n.startswith("awa_")}, names

    ran = manage(env, "shell", "-c", SCRIPT)
    lines = [line for line in ran.stdout.splitlines() if line.startswith("RESULT ")]
    assert ran.returncode == 0 and lines, ran.stdout + ran.stderr
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["db"] == "jobs"
    assert result["many"] == 5 and result["count"] == 6
    assert (result["listing"], result["listed"], result["detail"]) == (200, True, 200)

    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", "multi", "--poll-interval", "0.2"],
        cwd=ROOT, env=env, stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        with connect_outside_django(jobs_database) as jobs:
            deadline = time.monotonic() + 60
            while True:
                row = jobs.execute(
                    "SELECT count(*) FROM awa_job_all WHERE queue = 'multi' AND state = 'completed'"
                ).fetchone()
                if row and row[0] == 6:
                    break
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
                time.sleep(0.05)  # polling for the condition, bounded by the deadline
    finally:
        worker.terminate()
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()[-3000:]
