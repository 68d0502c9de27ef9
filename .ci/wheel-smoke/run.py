"""The built wheel, installed in a clean virtualenv, used as a new project would: migrate, enqueue
a job, run ``awa_worker`` until the job is completed, stop it with SIGTERM (exit 0).

    .venv-wheel/bin/python .ci/wheel-smoke/run.py DATABASE_URL

DATABASE_URL names a server the smoke may make a database on (``awa_wheel_smoke``, made afresh).
It fails when ``awa_django`` is imported from anywhere but the virtualenv's site-packages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATABASE = "awa_wheel_smoke"


def fresh_database(url: str) -> str:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    return make_conninfo(url, dbname=DATABASE)


def main(url: str) -> int:
    os.environ.update(
        AWA_SMOKE_DATABASE=fresh_database(url),
        DJANGO_SETTINGS_MODULE="smoke_settings",
        PYTHONPATH=str(HERE),
    )
    sys.path.insert(0, str(HERE))
    import django

    django.setup()
    from django.core.management import call_command

    import awa_django
    from awa_django.models import Job

    origin = Path(awa_django.__file__).resolve()
    if "site-packages" not in origin.parts:
        print(f"wheel smoke: awa_django came from {origin}, not the installed wheel", file=sys.stderr)
        return 1
    call_command("migrate", verbosity=0)
    job = Job.objects.enqueue("smoke.hello", {"name": "wheel"}, queue="smoke")
    log = Path(tempfile.mkdtemp(prefix="awa-wheel-smoke-")) / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(  # this interpreter, the installed package's command
            [sys.executable, "-m", "django", "awa_worker", "-q", "smoke", "--poll-interval", "0.2"],
            cwd=HERE,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while (state := Job.objects.get(pk=job.pk).state) != "completed":
            if worker.poll() is not None or time.monotonic() > deadline:
                print(f"wheel smoke: job {job.pk} is {state}; worker log:\n{log.read_text()[-3000:]}", file=sys.stderr)
                return 1
            time.sleep(0.1)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        code = worker.wait(60)
    if code != 0:
        print(f"wheel smoke: the worker exited {code} on SIGTERM; log:\n{log.read_text()[-3000:]}", file=sys.stderr)
        return 1
    print(f"wheel smoke: awa_django from {origin.parent}: migrated, job {job.pk} enqueued, run, completed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
