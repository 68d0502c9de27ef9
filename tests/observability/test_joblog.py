"""One log line per attempt outcome, at its level, with the structured fields; the metrics sink
counts the same outcomes. Real in-process workers on the test database."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from awa_django.exceptions import Cancel, Snooze, TerminalError
from awa_django.models import Job
from awa_django.observability.sink import UNREGISTERED_KIND
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext
from tests.harness import make_config, running_worker, wait_until
from tests.observability.support import RecordingSink
from tests.worker.support import Gates, wait_for_row

QUEUE = "joblog"
FIELDS = {"job_id", "kind", "queue", "attempt", "duration_ms", "outcome"}


def _registry(gates: Gates) -> Registry:
    async def ok() -> None:
        return None

    async def flaky(context: JobContext) -> None:
        if context.attempt == 1:
            raise RuntimeError("first attempt fails")

    async def snooze() -> None:
        raise Snooze(3600)

    async def terminal() -> None:
        raise TerminalError("never works")

    async def cancel() -> None:
        raise Cancel("not wanted any more")

    async def gated(context: JobContext) -> None:
        await gates.wait(context.job_id)

    registry = Registry()
    handlers: list[tuple[str, Callable[..., Any], bool]] = [
        ("ok", ok, False),
        ("flaky", flaky, True),
        ("snooze", snooze, False),
        ("terminal", terminal, False),
        ("cancel", cancel, False),
        ("gated", gated, True),
    ]
    for kind, func, takes_context in handlers:
        registry.register(JobHandler(kind, func, queue=QUEUE, takes_context=takes_context))
    return registry


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def job_lines(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="awa_django.jobs")
    return caplog


def _line(caplog: pytest.LogCaptureFixture, job_id: int, outcome: str) -> logging.LogRecord:
    def find() -> logging.LogRecord | None:
        for record in list(caplog.records):
            if getattr(record, "job_id", None) == job_id and getattr(record, "outcome", None) == outcome:
                return record
        return None

    found: logging.LogRecord = wait_until(find, timeout=20, what=f"a {outcome} line for job {job_id}")
    return found


def _assert_fields(record: logging.LogRecord, job: Job, outcome: str, attempt: int) -> None:
    assert record.name == "awa_django.jobs"
    assert FIELDS <= set(record.__dict__), record.__dict__
    fields = {name: getattr(record, name) for name in FIELDS}
    assert fields["job_id"] == job.pk
    assert fields["kind"] == job.kind
    assert fields["queue"] == job.queue
    assert fields["attempt"] == attempt
    assert fields["outcome"] == outcome
    message = record.getMessage()
    assert f"job_id={job.pk}" in message and f"kind={job.kind}" in message and f"job {outcome}" in message


@pytest.mark.django_db(transaction=True)
def test_outcome_lines__each_outcome_at_its_level_with_the_fields(
    job_lines: pytest.LogCaptureFixture, sink: RecordingSink, gates: Gates
) -> None:
    with running_worker(make_config([QUEUE]), registry=_registry(gates), metrics=sink):
        ok = Job.objects.enqueue("ok", queue=QUEUE)
        flaky = Job.objects.enqueue("flaky", queue=QUEUE, max_attempts=3)
        snooze = Job.objects.enqueue("snooze", queue=QUEUE)
        terminal = Job.objects.enqueue("terminal", queue=QUEUE)
        cancel = Job.objects.enqueue("cancel", queue=QUEUE)
        unknown_kind = f"mistyped_{uuid.uuid4().hex[:8]}"
        unknown = Job.objects.enqueue(unknown_kind, queue=QUEUE)

        completed = _line(job_lines, ok.pk, "completed")
        assert completed.levelno == logging.DEBUG
        _assert_fields(completed, ok, "completed", 1)
        assert completed.duration_ms is not None and completed.duration_ms >= 0  # type: ignore[attr-defined]

        retried = _line(job_lines, flaky.pk, "retried")
        assert retried.levelno == logging.INFO
        _assert_fields(retried, flaky, "retried", 1)
        assert "first attempt fails" in retried.error  # type: ignore[attr-defined]
        assert retried.delay_s > 0  # type: ignore[attr-defined]

        snoozed = _line(job_lines, snooze.pk, "snoozed")
        assert snoozed.levelno == logging.INFO
        _assert_fields(snoozed, snooze, "snoozed", 1)
        assert snoozed.delay_s == 3600  # type: ignore[attr-defined]

        failed = _line(job_lines, terminal.pk, "failed")
        assert failed.levelno == logging.WARNING
        _assert_fields(failed, terminal, "failed", 1)
        assert "never works" in failed.error  # type: ignore[attr-defined]

        cancelled = _line(job_lines, cancel.pk, "cancelled")
        assert cancelled.levelno == logging.WARNING
        _assert_fields(cancelled, cancel, "cancelled", 1)
        assert "not wanted any more" in cancelled.error  # type: ignore[attr-defined]

        unknown_line = _line(job_lines, unknown.pk, "failed")
        assert unknown_line.levelno == logging.WARNING
        _assert_fields(unknown_line, unknown, "failed", 1)
        message = unknown_line.getMessage()
        assert f"no handler is registered for kind {unknown_kind!r}" in message and "@job(" in message

        wait_until(lambda: sink.count(QUEUE, UNREGISTERED_KIND, "failed") == 1, what="the unknown kind counted")
        for kind, outcome in [
            ("ok", "completed"),
            ("flaky", "retried"),
            ("snooze", "snoozed"),
            ("terminal", "failed"),
            ("cancel", "cancelled"),
        ]:
            assert sink.count(QUEUE, kind, outcome) == 1, (kind, outcome, sink.finished)
        # a mistyped kind is one series, not one per spelling
        assert sink.count(QUEUE, unknown_kind, "failed") == 0
        started_kinds = {kind for _, kind, _ in sink.started}
        assert {"ok", "flaky", "snooze", "terminal", "cancel"} <= started_kinds
        assert all(waited is not None and waited >= 0 for _, _, waited in sink.started)


@pytest.mark.django_db(transaction=True)
def test_outcome_lines__a_write_refused_by_the_lease_guard_is_logged_and_counted_lost(
    job_lines: pytest.LogCaptureFixture, sink: RecordingSink, gates: Gates
) -> None:
    with running_worker(make_config([QUEUE]), registry=_registry(gates), metrics=sink):
        job = Job.objects.enqueue("gated", queue=QUEUE)
        running = wait_for_row(job.pk, state="running")
        # What a rescue does meanwhile: the row moves on under a newer lease. Due in an hour, so
        # the leader's promotion (its own task since issue 43, prompt) leaves it retryable.
        Job.objects.filter(pk=job.pk).update(
            state="retryable", run_lease=running.run_lease + 1, run_at=timezone.now() + timedelta(hours=1)
        )
        gates.open(job.pk)
        lost = _line(job_lines, job.pk, "lost")
        assert lost.levelno == logging.WARNING
        _assert_fields(lost, job, "lost", 1)
        assert "was not written" in lost.getMessage()
        wait_until(lambda: sink.count(QUEUE, "gated", "lost") == 1, what="the lost attempt counted")
        assert sink.count(QUEUE, "gated", "completed") == 0
    assert Job.objects.get(pk=job.pk).state == "retryable"


@pytest.mark.django_db(transaction=True)
def test_outcome_lines__a_rescue_logs_each_rescued_job(
    job_lines: pytest.LogCaptureFixture, sink: RecordingSink
) -> None:
    job = Job.objects.enqueue("some_kind", queue="elsewhere", max_attempts=5)
    Job.objects.filter(pk=job.pk).update(
        state="running", attempt=1, run_lease=1, heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    with running_worker(make_config([QUEUE]), registry=Registry(), metrics=sink):
        rescued = _line(job_lines, job.pk, "rescued")
    assert rescued.levelno == logging.WARNING
    _assert_fields(rescued, job, "rescued", 1)
    assert "stopped heartbeating" in rescued.error  # type: ignore[attr-defined]
    assert "now retryable" in rescued.getMessage()
    assert sink.count("elsewhere", "some_kind", "rescued") == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue__unknown_kind_warns_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="awa_django.enqueue")
    kind = f"mistyped_{uuid.uuid4().hex[:8]}"
    Job.objects.enqueue(kind)
    Job.objects.enqueue(kind)
    Job.objects.enqueue_many([{"kind": kind}, {"kind": "noop"}])
    Job.objects.enqueue("noop")  # registered in testproject.demo: no warning
    lines = [r for r in caplog.records if r.name == "awa_django.enqueue"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].kind == kind  # type: ignore[attr-defined]
    assert repr(kind) in lines[0].getMessage() and "@job(" in lines[0].getMessage()

    other = f"mistyped_{uuid.uuid4().hex[:8]}"
    Job.objects.enqueue_many([{"kind": other, "args": {"a": 1}}])
    assert [r.kind for r in caplog.records if r.name == "awa_django.enqueue"] == [kind, other]  # type: ignore[attr-defined]
