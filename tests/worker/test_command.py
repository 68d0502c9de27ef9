"""``manage.py awa_worker`` refuses bad command-line values with a message naming the value."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from awa_django.models import Queue
from tests.harness import ROOT, wait_until, worker_env


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--poll-interval", "0"], "argument --poll-interval: '0' must be above 0 seconds"),
        (["--poll-interval", "-2"], "argument --poll-interval: '-2' must be above 0 seconds"),
        (["--poll-interval", "soon"], "argument --poll-interval: 'soon' is not a number of seconds"),
        (["--poll-interval", "nan"], "argument --poll-interval: 'nan' is not a finite number of seconds"),
        (["--poll-interval", "inf"], "argument --poll-interval: 'inf' is not a finite number of seconds"),
        (["--shutdown-timeout", "inf"], "argument --shutdown-timeout: 'inf' is not a finite number of seconds"),
        (["--heartbeat-interval", "0"], "argument --heartbeat-interval: '0' must be above 0 seconds"),
        (["--global-max-workers", "0"], "argument --global-max-workers: '0' must be at least 1"),
        (["--global-max-workers", "2.5"], "argument --global-max-workers: '2.5' is not a whole number"),
        # The snapshot's integer column holds it: past that, the worker was never seen live.
        (
            ["--global-max-workers", "3000000000"],
            "argument --global-max-workers: '3000000000' must be at most 2147483647",
        ),
        (["--shutdown-timeout", "-1"], "argument --shutdown-timeout: '-1' must be above 0 seconds"),
        # One rule with AWA["SHUTDOWN_TIMEOUT"] (check awa.E003): above 0.
        (["--shutdown-timeout", "0"], "argument --shutdown-timeout: '0' must be above 0 seconds"),
        # At most a century: a staleness of 1e12 s failed every rescue round (now() - it left the timestamps).
        (["--heartbeat-staleness", "1e12"], "argument --heartbeat-staleness: '1e12' must be above 0 seconds, at most"),
        (["--poll-interval", "1e15"], "argument --poll-interval: '1e15' must be above 0 seconds, at most"),
        (["-q", ""], "invalid queue name ''"),
        (["-q", "   "], "invalid queue name '   '"),
        (["-q", "x" * 256], "invalid queue name 'xxx"),
        (["-q", " reports "], "invalid queue name ' reports ': it starts or ends with whitespace"),
        (["-q", "a\tb"], "invalid queue name 'a\\tb': it holds a control character"),
    ],
    ids=lambda value: " ".join(value)[:40] if isinstance(value, list) else "",
)
def test_awa_worker__bad_cli_value__command_error_naming_it(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("awa_worker", *argv)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--heartbeat-interval", "5", "--heartbeat-staleness", "2"],
            "heartbeat_staleness (2.0s) must exceed heartbeat_interval (5.0s)",
        ),
    ],
)
def test_awa_worker__inconsistent_settings__command_error_naming_them(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("awa_worker", "-q", "default", *argv)


@pytest.mark.django_db
def test_awa_worker__min_workers_above_the_global_maximum__error_names_the_queues() -> None:
    from tests.factories import QueueFactory

    QueueFactory(name="emails", min_workers=6)
    QueueFactory(name="reports", min_workers=4)
    QueueFactory(name="idle", min_workers=0)

    with pytest.raises(CommandError) as caught:
        call_command("awa_worker", "-q", "emails", "-q", "reports", "-q", "idle", "--global-max-workers", "8")

    assert str(caught.value) == (
        "sum of min_workers (10) exceeds global_max_workers (8); lower some queue's min_workers or raise "
        "global_max_workers (min_workers of the largest queues: emails=6, reports=4; edit them in the Queue admin)"
    )


def test_awa_worker__every_option_has_help() -> None:
    from awa_django.management.commands.awa_worker import Command

    parser = Command().create_parser("manage.py", "awa_worker")
    ours = [a for a in parser._actions if a.dest not in {"help", "version"} and a.option_strings]
    missing = [a.option_strings[-1] for a in ours if not a.help]
    assert "--heartbeat-interval" in {s for a in ours for s in a.option_strings}
    assert missing == [], f"options without help: {missing}"


@pytest.mark.subprocess
@pytest.mark.slow
def test_awa_worker__bad_value_on_the_command_line__usage_error_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "--poll-interval", "0"],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 2, result.stderr
    assert "usage: manage.py awa_worker" in result.stderr
    assert "argument --poll-interval: '0' must be above 0 seconds" in result.stderr


@pytest.mark.subprocess
@pytest.mark.slow
def test_awa_worker__empty_queue_name_on_the_command_line__error_exit_1() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", ""],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1, result.stderr
    assert "CommandError: invalid queue name ''" in result.stderr


def test_awa_worker__unknown_queue_on_the_command_line__warned_at_start_naming_it_and_the_fix(spawn: Any) -> None:
    """`-q nosuchqueue` (a typo) would otherwise create a Queue row silently, served by every later worker."""
    Queue.objects.create(name="reports")
    worker = spawn("-q", "nosuchqueue", "-q", "reports", "-q", "default", "-v", "1")
    wait_until(lambda: "worker started instance=" in worker.log, timeout=60, what="the worker's start line")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log

    log = worker.log
    (warning,) = [line for line in log.splitlines() if line.startswith("warning: queue")]
    assert warning.startswith("warning: queue 'nosuchqueue' (-q) has no Queue row and no @job names it;")
    assert "A typo? Known queues: " in warning and "reports" in warning
    assert "create it in the Queue admin, or declare a @job with queue='nosuchqueue'" in warning
    assert log.index(warning) < log.index("worker started instance=")  # said at start, before it serves anything


@pytest.fixture
def unmigrated_database(django_db_blocker: Any) -> Any:
    """An empty database on the test server: what a worker meets when it is deployed before `migrate`."""
    from django.db import connection as django_connection

    name = "awa_unmigrated_cmd"
    with django_db_blocker.unblock(), django_connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with django_db_blocker.unblock(), django_connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.subprocess
@pytest.mark.slow
def test_awa_worker__database_not_migrated__command_error_naming_migrate_not_a_traceback(
    unmigrated_database: str,
) -> None:
    """Deployed before `migrate` ran (or pointed at the wrong database), the worker stopped with a
    ProgrammingError traceback ('relation "awa_queue" does not exist') that named no fix."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", "default", "--wait-for-database", "0"],
        cwd=ROOT,
        env=worker_env(AWA_DB_NAME=unmigrated_database),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "migrate" in result.stderr, result.stderr[-3000:]
    assert repr(unmigrated_database) in result.stderr, result.stderr[-3000:]
