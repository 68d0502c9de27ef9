"""docs/tutorial.md runs as written: its marked blocks, in order, from a fresh ``startproject``.

Each step of the page is a fenced block under an HTML comment (invisible on the site) that says
what to do with it: ``<!-- tutorial: run -->`` runs a shell block, ``<!-- tutorial: append PATH -->``
and ``<!-- tutorial: write PATH -->`` put a Python block into a file of the new project, and
``<!-- tutorial: worker -->`` starts the worker, waits until the enqueued job is completed, and
presses Ctrl-C. Where the prose after a block says "It prints `…`", the output must hold that.

Two things the reader does that the test does for itself: the virtualenv and ``pip install`` of
step 1 (this interpreter, ``sys.executable``, already has awa_django: ``python``, ``python3`` and
``django-admin`` are shims that run it), and the database: the page's ``DATABASES`` is appended as
written, then pointed at a fresh database of its own on the test server, as the page tells the
reader to point it at theirs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import connection_params
from tests.docs.support import page

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

STEP = re.compile(
    r"<!-- tutorial: (?P<action>run|append|write|worker)(?: (?P<path>[\w./]+))?[^>]*-->\n"
    r"```(?P<lang>\w+)\n(?P<body>.*?)\n```\n(?P<after>.*?)(?=<!-- tutorial:|\Z)",
    re.S,
)
FENCE = re.compile(r"^```(sh|python)$", re.M)
PRINTS = re.compile(r"It prints `([^`]+)`")
STOPPED = re.compile(r"`worker stopped … ([^`]+)`")  # the stop line the page quotes, after its "…"
# The lines of step 1 that make the reader's environment; the test's interpreter stands in for them.
ENVIRONMENT = ("python3 -m venv ", "pip install ")
# Generous, for a loaded machine: how long one command, and the worker's job, may take.
COMMAND_TIMEOUT = 300.0
JOB_TIMEOUT = 120.0


@dataclass(frozen=True)
class Step:
    action: str
    path: str | None
    lang: str
    body: str
    prints: str | None
    after: str = ""  # the prose after the block, up to the next step


def steps(text: str) -> list[Step]:
    found = [
        Step(
            m["action"],
            m["path"],
            m["lang"],
            m["body"],
            (printed[1] if (printed := PRINTS.search(m["after"])) else None),
            m["after"],
        )
        for m in STEP.finditer(text)
    ]
    # Every shell and Python block of the page is a step: a new block left unmarked would not run.
    assert len(found) == len(FENCE.findall(text)), "a ```sh or ```python block of docs/tutorial.md has no marker"
    return found


def test_steps__reads_every_marked_block_of_the_page() -> None:
    found = steps(page("tutorial.md"))

    assert [step.action for step in found] == ["run", "append", "run", "write", "run", "worker", "run"]
    assert [step.path for step in found if step.path] == ["mysite/settings.py", "shop/jobs.py"]
    assert [step.prints for step in found if step.prints] == ["1 available default", "completed greeted Ada 1"]


def test_steps__an_unmarked_block_is_refused() -> None:
    text = page("tutorial.md") + "\n```sh\npython manage.py something_new\n```\n"

    with pytest.raises(AssertionError, match="has no marker"):
        steps(text)


@pytest.fixture
def fresh_database() -> Iterator[dict[str, Any]]:
    """A new, empty database on the test server, dropped afterwards; yields its connect keywords."""
    name = f"awa_tutorial_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**connection_params("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield connection_params(name)
    finally:
        with psycopg.connect(**connection_params("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def shims(directory: Path) -> Path:
    """``python``, ``python3`` and ``django-admin`` that run this interpreter (the reader's venv)."""
    directory.mkdir()
    commands = {"python": "", "python3": "", "django-admin": " -m django"}
    for name, module in commands.items():
        shim = directory / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}"{module} "$@"\n')
        shim.chmod(0o755)
    return directory


def database_override(params: dict[str, Any]) -> str:
    """What the reader changes in the page's DATABASES: the connection to their own server."""
    names = {"dbname": "NAME", "user": "USER", "host": "HOST", "port": "PORT", "password": "PASSWORD"}
    values = {names[key]: value for key, value in params.items() if key in names}
    options = {key: value for key, value in params.items() if key not in names and key != "client_encoding"}
    if options:
        values["OPTIONS"] = options
    comment = "# tests/docs/test_tutorial.py: the test server, in place of the page's example values"
    return f"\n\n{comment}\nDATABASES['default'].update({values!r})\n"


class Tutorial:
    """The reader's shell: a working directory that ``cd`` moves, and an environment."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.cwd = root
        self.env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PYTHONUNBUFFERED"] = "1"
        self.pwd_file = root / ".pwd"

    def run(self, body: str) -> str:
        script = f'{body}\npwd > "{self.pwd_file}"\n'  # the next step starts where this one ended
        done = subprocess.run(  # the page's own commands, in a tmp directory
            ["/bin/bash", "-e", "-c", script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, f"step failed:\n{body}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        self.cwd = Path(self.pwd_file.read_text().strip())
        return done.stdout

    def worker(self, body: str, params: dict[str, Any], job_id: int) -> str:
        """Start the worker as the page does, wait until job ``job_id`` is completed, press Ctrl-C."""
        log = self.cwd / ".worker.log"
        with log.open("w") as out:
            process = subprocess.Popen(  # the page's own command
                ["/bin/bash", "-c", body],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the terminal's process group: here, this one
            )
            try:
                state = wait_for_completion(params, job_id, process)
                assert state == "completed", f"job {job_id} is {state!r}; the worker said:\n{log.read_text()}"
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=COMMAND_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        output = log.read_text()
        assert process.returncode == 0, f"the worker exited with {process.returncode} after Ctrl-C:\n{output}"
        return output


def wait_for_completion(params: dict[str, Any], job_id: int, process: subprocess.Popen[bytes]) -> str | None:
    """The job's state once it is final, or its state when the worker exited or the time ran out."""
    deadline = time.monotonic() + JOB_TIMEOUT
    with psycopg.connect(**params, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT state FROM awa_job_all WHERE id = %s", [job_id]).fetchone()
            state = None if row is None else str(row[0])
            if state in ("completed", "failed", "cancelled") or process.poll() is not None:
                return state
            if time.monotonic() > deadline:
                return state
            time.sleep(0.2)  # polls the condition itself; the worker gives no other sign


def test_tutorial__runs_as_written_from_a_fresh_startproject(tmp_path: Path, fresh_database: dict[str, Any]) -> None:
    shell = Tutorial(tmp_path, shims(tmp_path / "bin"))
    job_id: int | None = None
    outputs: list[str] = []
    for number, step in enumerate(steps(page("tutorial.md"))):
        if step.action == "run":
            body = step.body
            if number == 0:  # step 1: the reader's venv and pip install are this interpreter
                skipped = [line for line in body.splitlines() if line.startswith(ENVIRONMENT)]
                assert len(skipped) == len(ENVIRONMENT), f"step 1 no longer makes the environment as expected:\n{body}"
                body = "\n".join(line for line in body.splitlines() if line not in skipped)
            output = shell.run(body)
            outputs.append(output)
            if step.prints is not None:
                lines = [line.strip() for line in output.splitlines()]
                assert step.prints in lines, f"the page says it prints {step.prints!r}; it printed:\n{output}"
                if job_id is None:
                    job_id = int(step.prints.split()[0])  # "1 available default": the enqueued job's id
        elif step.action in ("append", "write"):
            assert step.path is not None and step.lang == "python"
            target = shell.cwd / step.path
            text = step.body + "\n"
            if step.path.endswith("settings.py"):
                assert '"ENGINE": "django.db.backends.postgresql"' in step.body
                text += database_override(fresh_database)
            if step.action == "append":
                assert target.exists(), f"{step.path} does not exist to append to"
                with target.open("a") as file:
                    file.write("\n" + text)
            else:
                target.write_text(text)
        else:
            assert job_id is not None, "the worker step comes before any step printed the job's id"
            output = shell.worker(step.body, fresh_database, job_id)
            assert "Hello, Ada!" in output
            assert f"job completed job_id={job_id} kind=greet queue=default attempt=1" in output
            assert "worker stopped" in output and "written=1" in output
            quoted = STOPPED.search(step.after)
            assert quoted is not None, "the page no longer quotes the worker's stop line"
            for field in quoted[1].split():  # each key=value the page says the stop line has
                assert field in output, f"the page says the worker stops with {field!r}; it said:\n{output}"
    assert job_id is not None
    assert any("Applying awa.0001_initial... OK" in output for output in outputs)  # as the page says
