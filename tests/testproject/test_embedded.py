"""The embedded PostgreSQL's commands, on a private data directory (AWA_PGDATA), never the shared one.

The bug these pin down: after a test run, ``python -m testproject.embedded stop`` printed nothing,
exited 0 and left the server running, because the provider's ``.handle_pids.json`` still listed killed
worker processes. Each test starts its own server (initdb included), so they are marked slow.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from testproject import embedded
from tests.harness import ROOT, wait_until


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AWA_DB_NAME", "PYTEST_ADDOPTS")}
    env.update(AWA_PGDATA=str(data_dir), PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="testproject.settings")
    env.update(extra)
    return env


def _embedded(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "testproject.embedded", *args],
        cwd=ROOT,
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _postmaster_pid(data_dir: Path) -> int | None:
    pid_file = data_dir / "postmaster.pid"
    return int(pid_file.read_text().split()[0]) if pid_file.exists() else None


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # A short path: a Unix socket path is limited to ~107 bytes, and the socket lives here.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="awa-pg-") as parent:
        path = Path(parent) / "pgdata"
        try:
            yield path
        finally:
            pid = _postmaster_pid(path)
            if pid is not None and psutil.pid_exists(pid):  # the test failed before stopping it
                _embedded(path, "stop")


@pytest.mark.subprocess
@pytest.mark.slow
def test_stop__after_a_test_run_with_killed_handle_holders__stops_and_says_so(data_dir: Path) -> None:
    # A real test run on the private server: a worker subprocess, stopped by signals.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/worker/test_forced_stop.py"],
        cwd=ROOT,
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # And the exact hole: a process that opened the server through the provider and was killed, so its
    # pid stays in .handle_pids.json forever.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from testproject import embedded;"
            " embedded.import_provider().get_server(sys.argv[1], cleanup_mode=None);"
            " print('ready', flush=True); time.sleep(600)",
            str(data_dir),
        ],
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "ready"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert str(holder.pid) in (data_dir / ".handle_pids.json").read_text()
    pid = _postmaster_pid(data_dir)
    assert pid is not None and psutil.pid_exists(pid)

    stopped = _embedded(data_dir, "stop")

    assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped"), stopped.stderr
    wait_until(lambda: not psutil.pid_exists(pid), timeout=30, what=f"postmaster {pid} to exit")
    assert _embedded(data_dir, "status").stdout.strip() == "not running"
    again = _embedded(data_dir, "stop")
    assert (again.returncode, again.stdout.strip()) == (0, "not running")


@pytest.mark.subprocess
@pytest.mark.slow
def test_url__points_a_project_at_the_embedded_server(data_dir: Path) -> None:
    url = _embedded(data_dir, "url")
    assert url.returncode == 0, url.stderr
    assert url.stdout.startswith("postgresql://postgres@/awa?host=")

    # DATABASE_URL set, the regular postgresql backend: what a user's new project would do.
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.db import connection;"
            "print(connection.vendor, connection.settings_dict['ENGINE'], connection.cursor().connection.info.dbname)",
        ],
        cwd=ROOT,
        env=_env(data_dir, DATABASE_URL=url.stdout.strip()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == ["postgresql", "django.db.backends.postgresql", "awa"]

    # A database of the user's own (the tutorial's), created on first ask, the same URL after.
    own = [_embedded(data_dir, "url", "tutorial") for _ in range(2)]
    assert [r.returncode for r in own] == [0, 0], own[0].stderr
    assert own[0].stdout == own[1].stdout
    assert own[0].stdout.startswith("postgresql://postgres@/tutorial?host=")
    with psycopg.connect(own[0].stdout.strip()) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("tutorial",)
    bad = _embedded(data_dir, "url", "my-db; drop")
    assert bad.returncode != 0
    assert "database name 'my-db; drop'" in bad.stderr and "e.g. tutorial" in bad.stderr
    assert _embedded(data_dir, "stop").stdout.strip() == "stopped"


@pytest.mark.slow
@pytest.mark.subprocess
def test_worker_started_while_the_server_is_not_ready__waits_for_it_then_runs(data_dir: Path) -> None:
    # The provider asserts that a server it finds running is "ready"; one that is still starting
    # (or, as here, standing by: with standby.signal and hot_standby off it accepts no connection
    # and says "standby" in postmaster.pid until promoted) failed that
    # assertion, and the worker exited 1. It must read as a database not ready yet, and be waited for.
    env = _env(data_dir)
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    assert _embedded(data_dir, "stop").stdout.strip() == "stopped"
    (data_dir / "standby.signal").touch()
    # As the provider starts it (the socket only), and not accepting connections while standing by.
    options = shlex.join(["-h", "", "-k", str(data_dir), "-c", "hot_standby=off"])
    started = embedded.pg_ctl("-w", "-t", "120", "-l", str(data_dir / "log"), "-o", options, "start", data_dir=data_dir)
    assert started.returncode == 0, started.stdout
    assert "standby" in (data_dir / "postmaster.pid").read_text()

    log = data_dir.parent / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "awa_worker", "-q", "standby", "--wait-for-database", "300"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: "database unavailable at startup" in log.read_text() or worker.poll() is not None,
            timeout=120,
            what="the worker to wait for the database",
        )
        assert worker.poll() is None, log.read_text()[-3000:]
        assert "not ready yet" in log.read_text(), log.read_text()[-3000:]
        promoted = embedded.pg_ctl("-w", "promote", data_dir=data_dir)
        assert promoted.returncode == 0, promoted.stdout
        wait_until(
            lambda: "worker started instance=" in log.read_text() or worker.poll() is not None,
            timeout=120,
            what="the worker to start once the server is ready",
        )
        assert worker.poll() is None, log.read_text()[-3000:]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)


@pytest.mark.subprocess
def test_unknown_command__exit_2_naming_the_commands(tmp_path: Path) -> None:
    result = _embedded(tmp_path / "never-created", "restart")
    assert result.returncode == 2
    assert "unknown command 'restart'" in result.stderr
    assert "start, stop, status, url" in result.stderr
    extra = _embedded(tmp_path / "never-created", "status", "tutorial")
    assert extra.returncode == 2 and "unknown command 'status tutorial'" in extra.stderr
    assert not (tmp_path / "never-created").exists()


@pytest.mark.subprocess
def test_manage_py_help_and_check__start_no_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    for command in (["help"], ["check"]):
        result = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=_env(data_dir),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
    assert not data_dir.exists()  # no initdb, no server
    assert _embedded(data_dir, "status").stdout.strip() == "not running"


# Each process waits for the go file, then starts the embedded server on the same fresh data directory
# and connects. The directory's mkdir is made slow (a fault injected, not a wait for anything): it
# widens the moment between a process's "does it exist?" and its mkdir, where another process's
# mkdir lands, as it did when pytest -n 3 started on a fresh clone.
STARTER = """
import os, pathlib, sys, time
from pathlib import Path

data = Path(os.environ["AWA_PGDATA"]).resolve()
real_mkdir = pathlib.Path.mkdir

def slow_mkdir(self, *args, **kwargs):
    if Path(self).resolve() == data:
        time.sleep(0.3)
    return real_mkdir(self, *args, **kwargs)

pathlib.Path.mkdir = slow_mkdir
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
import psycopg
from testproject import embedded
host = embedded.socket_dir(data)
with psycopg.connect(host=host, dbname="postgres", user="postgres") as conn:
    print("connected", conn.execute("SELECT 1").fetchone()[0])
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_first_start__processes_starting_together_on_a_fresh_directory__all_connect(
    data_dir: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(go)],
            cwd=ROOT,
            env=_env(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    go.touch()
    outputs = [starter.communicate(timeout=300) for starter in starters]
    assert [starter.returncode for starter in starters] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    assert [out.split() for out, _ in outputs] == [["connected", "1"]] * 3
    assert _embedded(data_dir, "stop").stdout.strip() == "stopped"
