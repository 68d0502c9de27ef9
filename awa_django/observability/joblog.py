"""One log line per attempt outcome, on the ``awa_django.jobs`` logger.

Levels: completed at DEBUG (with its duration); retried, snoozed, discarded (cancelled while
running: the line says "job cancelled while running", since "discard" is ``discard_on``'s word for
failing at once) and handed_back (at shutdown) at INFO; failed, cancelled, lost and rescued at WARNING,
with the error (a job failed for a kind with no handler says so).
Every line carries structured ``extra`` fields, so a JSON formatter or structlog gets them as
keys: ``job_id``, ``kind``, ``queue``, ``attempt``, ``duration_ms`` (None where no handler ran), ``outcome`` (one of
``sink.OUTCOMES``), and where they apply ``workflow_id`` (a workflow's step), ``error`` and ``delay_s``.
The message repeats them as ``key=value`` for plain-text logs. Metrics carry no workflow label:
workflow ids are unbounded, and each would start new series.

The level is checked before anything is built, so a completed job costs one ``isEnabledFor`` call
when DEBUG is off.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from awa_django.observability.sink import PARKED, STATE_OUTCOMES, UNREGISTERED_KIND, MetricsSink
from awa_django.states import JobState

if TYPE_CHECKING:
    from awa_django.context import ClaimedJob, Outcome
    from awa_django.registry import Registry

logger = logging.getLogger("awa_django.jobs")

LEVELS = {
    STATE_OUTCOMES[JobState.COMPLETED]: logging.DEBUG,
    "retried": logging.INFO,
    "snoozed": logging.INFO,
    PARKED: logging.INFO,
    STATE_OUTCOMES[JobState.FAILED]: logging.WARNING,
    STATE_OUTCOMES[JobState.CANCELLED]: logging.WARNING,
    "discarded": logging.INFO,
    "handed_back": logging.INFO,
    "lost": logging.WARNING,
    "rescued": logging.WARNING,
}
# What the line says for an outcome whose label would mislead: the rest say their label.
WORDS = {"discarded": "cancelled while running"}


def error_text(outcome: Outcome) -> str | None:
    if outcome.error is None:
        return None
    text = outcome.error.get("error")
    return None if text is None else str(text)


def log_job(
    outcome: str,
    *,
    job_id: int,
    kind: str,
    queue: str,
    attempt: int,
    duration_ms: float | None = None,
    error: str | None = None,
    delay_s: float | None = None,
    note: str = "",
    workflow_id: int | None = None,
) -> None:
    """Write one outcome line (if its level is enabled)."""
    level = LEVELS[outcome]
    if not logger.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "job_id": job_id,
        "kind": kind,
        "queue": queue,
        "attempt": attempt,
        "duration_ms": duration_ms,
        "outcome": outcome,
    }
    message = "job %s job_id=%s kind=%s queue=%s attempt=%s"
    args: list[Any] = [WORDS.get(outcome, outcome), job_id, kind, queue, attempt]
    if workflow_id is not None:
        fields["workflow_id"] = workflow_id
        message += " workflow_id=%s"
        args.append(workflow_id)
    if duration_ms is not None:
        message += " duration_ms=%.1f"
        args.append(duration_ms)
    if delay_s is not None:
        fields["delay_s"] = delay_s
        message += " delay_s=%.1f"
        args.append(delay_s)
    if error is not None:
        fields["error"] = error
        message += " error=%r"
        args.append(error)
    if note:
        message += "; " + note.replace("%", "%%")
    logger.log(level, message, *args, extra=fields)


def report_outcome(
    sink: MetricsSink,
    registry: Registry,
    job: ClaimedJob,
    outcome: Outcome,
    seconds: float,
    written: bool,
    refusal: str = "lost",
) -> None:
    """What the worker knows once an attempt's row is written (or found taken): count it, log it.

    A write refused by the (id, running, run_lease) guard counts as ``refusal`` (one of
    ``sink.REFUSALS``; the completer logs that line, it knows why); otherwise the outcome is the
    state written.
    """
    if not written:
        name = refusal
    elif outcome.parked:
        name = PARKED
    else:
        name = STATE_OUTCOMES.get(outcome.state, outcome.state)
    kind = job.kind
    note = ""
    if name == STATE_OUTCOMES[JobState.FAILED] and registry.get(kind) is None:
        kind = UNREGISTERED_KIND
        note = (
            f"no handler is registered for kind {job.kind!r} in this worker: "
            f"{registry.unknown_kind_hint(job.kind, job.metadata)}"
        )
    sink.job_finished(job.queue, kind, name, seconds)
    if written:
        log_job(
            name,
            job_id=job.id,
            kind=job.kind,
            queue=job.queue,
            attempt=job.attempt,
            duration_ms=seconds * 1000.0,
            error=error_text(outcome),
            delay_s=outcome.delay if name in ("retried", "snoozed", PARKED) else None,
            note=note,
            workflow_id=job.workflow_id,
        )
