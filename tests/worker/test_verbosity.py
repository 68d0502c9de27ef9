"""awa_worker's ``-v``: 2 logs every completed job and none of the worker's own DEBUG lines (claims,
hand-overs, wake-ups: several per job), 3 logs those too. The table is read from the loggers the
command configures; the end-to-end case from a real worker's log."""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Iterator

import pytest

from awa_django.management.commands.awa_worker import VERBOSITY, Command
from awa_django.models import Job
from tests.worker.support import Spawner, wait_for_row

QUEUE = "verbosity"
# testproject's LOGGING format: "%(asctime)s %(levelname)s %(name)s %(message)s".
LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (?P<level>[A-Z]+) (?P<logger>\S+) (?P<message>.*)$", re.M)
JOBS_LOGGER = "awa_django.jobs"


@pytest.fixture
def loggers() -> Iterator[None]:
    """The levels _configure_logging sets, put back afterwards: the loggers outlive the test."""
    touched = [logging.getLogger(name) for name in ("awa_django", JOBS_LOGGER)]
    saved = [logger.level for logger in touched]
    try:
        yield
    finally:
        for logger, level in zip(touched, saved, strict=True):
            logger.setLevel(level)


@pytest.mark.usefixtures("loggers")
@pytest.mark.parametrize(
    ("verbosity", "info", "completed", "internals"),
    [(0, False, False, False), (1, True, False, False), (2, True, True, False), (3, True, True, True)],
)
def test_configure_logging__what_each_verbosity_lets_through(
    verbosity: int, info: bool, completed: bool, internals: bool
) -> None:
    logging.getLogger("awa_django").setLevel(logging.NOTSET)  # no level from LOGGING: -v decides alone
    logging.getLogger(JOBS_LOGGER).setLevel(logging.NOTSET)

    Command()._configure_logging(verbosity)

    assert logging.getLogger("awa_django.worker.supervisor").isEnabledFor(logging.INFO) is info
    assert logging.getLogger(JOBS_LOGGER).isEnabledFor(logging.INFO) is info  # retried, snoozed, handed back
    assert logging.getLogger(JOBS_LOGGER).isEnabledFor(logging.DEBUG) is completed  # "job completed"
    assert logging.getLogger("awa_django.worker.runner").isEnabledFor(logging.DEBUG) is internals
    assert logging.getLogger(JOBS_LOGGER).isEnabledFor(logging.WARNING)  # failed, rescued: always


@pytest.mark.usefixtures("loggers")
def test_configure_logging__default_verbosity_keeps_the_level_logging_set() -> None:
    logging.getLogger("awa_django").setLevel(logging.DEBUG)  # as settings.LOGGING may
    logging.getLogger(JOBS_LOGGER).setLevel(logging.NOTSET)

    Command()._configure_logging(1)

    assert logging.getLogger("awa_django.worker.runner").isEnabledFor(logging.DEBUG)
    assert logging.getLogger(JOBS_LOGGER).isEnabledFor(logging.DEBUG)


def test_verbosity_help__names_every_level_the_command_accepts() -> None:
    parser = Command().create_parser("manage.py", "awa_worker")
    [action] = [a for a in parser._actions if "--verbosity" in a.option_strings]

    assert action.choices is not None and sorted(action.choices) == sorted(VERBOSITY)
    assert all(f"{level}: " in str(action.help) for level in VERBOSITY)
    assert "completed job" in str(action.help) and "claims" in str(action.help)


def _worker_log(spawn: Spawner, verbosity: str) -> tuple[list[int], list[tuple[str, str, str]]]:
    """Three jobs run by a ``-v verbosity`` worker, which then stops: their ids, and its log's lines
    as (level, logger, message)."""
    jobs = [Job.objects.enqueue("noop", queue=QUEUE) for _ in range(3)]
    worker = spawn("-q", QUEUE, "-v", verbosity)
    for job in jobs:
        wait_for_row(job.pk, state="completed", timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-4000:]
    return [job.pk for job in jobs], LINE.findall(worker.log)


def _completed(lines: list[tuple[str, str, str]], job_id: int) -> list[str]:
    return [
        level
        for level, name, message in lines
        if name == JOBS_LOGGER and message.startswith(f"job completed job_id={job_id} kind=noop queue={QUEUE} ")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("verbosity", ["2", "3"])
def test_worker_log__v2_every_completed_job_and_no_internals__v3_the_internals_too(
    spawn: Spawner, verbosity: str
) -> None:
    ids, lines = _worker_log(spawn, verbosity)

    assert any(name == "awa_django.worker.supervisor" and m.startswith("worker started") for _, name, m in lines)
    for job_id in ids:
        assert _completed(lines, job_id) == ["DEBUG"], (job_id, lines)
    internals = [(name, message) for level, name, message in lines if level == "DEBUG" and name != JOBS_LOGGER]
    if verbosity == "2":
        assert internals == []
    else:
        # The worker's first claim takes the jobs enqueued before it started, and says so.
        assert any(message.startswith(f"claimed queue={QUEUE} ") for _, message in internals), internals
