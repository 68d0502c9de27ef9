"""``assert_enqueued`` / ``assert_not_enqueued`` / ``enqueued_jobs``: what is waiting to run.

"Enqueued" means waiting: scheduled, available or retryable, or a durable job parked in a wait
without a timeout (``waiting``, with a wait in force). A job that ran to completion is no longer
enqueued, and a workflow step waiting for its upstreams is not enqueued yet. ``parked=`` keeps the
durable jobs parked in a sleep or a wait (True) or leaves them out (False). A failed assertion
lists every waiting job and, for those of the expected kind, which field differs from what was
expected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from awa_django.conf import awa_settings
from awa_django.states import JobState
from awa_django.testing.runner import _kind_name

if TYPE_CHECKING:
    from awa_django.models import Job

WAITING_STATES = (JobState.SCHEDULED.value, JobState.AVAILABLE.value, JobState.RETRYABLE.value)
SHOWN = 25  # jobs listed in a failure message at most


def _expected_args(args: object) -> dict[str, Any] | None:
    """The expected args as stored JSON would read them back (tuples become lists, …)."""
    if args is None:
        return None
    if not isinstance(args, Mapping):
        raise TypeError(f"args must be a dict of the expected job args (a subset), not {args!r}")
    try:
        return dict(json.loads(json.dumps(dict(args))))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"args {args!r} cannot be compared with stored JSON ({exc}); pass JSON values") from None


def _args_differences(expected: dict[str, Any], actual: object) -> list[str]:
    stored = actual if isinstance(actual, dict) else {}
    differences = []
    for key, value in expected.items():
        if key not in stored:
            differences.append(f"args[{key!r}]: expected {value!r}, missing")
        elif stored[key] != value:
            differences.append(f"args[{key!r}]: expected {value!r}, got {stored[key]!r}")
    return differences


def _check_parked(parked: object) -> bool | None:
    if parked is not None and not isinstance(parked, bool):
        raise TypeError(f"parked must be True (parked jobs only), False (none of them) or None (any), not {parked!r}")
    return parked


def _differences(
    job: Job, kind: str | None, args: dict[str, Any] | None, queue: str | None, parked: bool | None = None
) -> list[str]:
    found = []
    if parked is not None and _is_parked(job) != parked:
        found.append(f"parked: expected {'a job parked in a sleep or a wait' if parked else 'one not parked'}")
    if kind is not None and job.kind != kind:
        found.append(f"kind: expected {kind!r}, got {job.kind!r}")
    if queue is not None and job.queue != queue:
        found.append(f"queue: expected {queue!r}, got {job.queue!r}")
    if args is not None:
        found += _args_differences(args, job.args)
    return found


def _is_parked(job: Job) -> bool:
    return bool(getattr(job, "awa_parked", False))


def _waiting(using: str | None) -> list[Job]:
    """The waiting jobs, each with ``awa_parked``: whether it is a durable job parked in a sleep or a wait."""
    from awa_django.models import Job

    jobs = Job.objects.using(using or awa_settings().DATABASE_ALIAS)
    parked = set(jobs.parked().values_list("pk", flat=True))
    found = list((jobs.filter(state__in=WAITING_STATES) | jobs.awaiting_event()).order_by("id"))
    for job in found:
        job.awa_parked = job.pk in parked  # type: ignore[attr-defined]
    return found


def enqueued_jobs(
    kind: Any = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    parked: bool | None = None,
    using: str | None = None,
) -> list[Job]:
    """The waiting jobs (scheduled, available, retryable, or parked in a wait) that match, in the
    order they were enqueued.

    ``kind``: a kind string, a ``@job`` handler or a ``@task`` (None: any kind). ``args``: every key
    given must be in the job's args with an equal value (other keys are not compared). ``queue``:
    the queue name. ``parked``: True, only durable jobs parked in a sleep or a wait; False, only
    jobs not parked; None, either.
    """
    kind_name = _kind_name(kind)
    expected = _expected_args(args)
    if queue is not None and not isinstance(queue, str):
        raise TypeError(f"queue must be a queue name (str) or None, not {queue!r}")
    wanted = _check_parked(parked)
    return [job for job in _waiting(using) if not _differences(job, kind_name, expected, queue, wanted)]


def _describe(kind: str | None, args: dict[str, Any] | None, queue: str | None, parked: bool | None = None) -> str:
    text = "job" if kind is None else f"job of kind {kind!r}"
    if parked is not None:
        text = ("parked " if parked else "unparked ") + text
    if args is not None:
        text += f" with args including {args!r}"
    if queue is not None:
        text += f" on queue {queue!r}"
    return text


def _listing(
    jobs: list[Job], kind: str | None, args: dict[str, Any] | None, queue: str | None, parked: bool | None = None
) -> str:
    if not jobs:
        return "no job is waiting (scheduled, available, retryable, or parked in a wait)"
    lines = [f"waiting jobs ({len(jobs)}):"]
    for job in jobs[:SHOWN]:
        state = f"{job.state}, parked" if _is_parked(job) else job.state
        lines.append(f"  #{job.pk} {job.kind!r} queue={job.queue!r} args={job.args!r} state={state}")
        if kind is None or job.kind == kind:
            lines += [f"      {difference}" for difference in _differences(job, None, args, queue, parked)]
    if len(jobs) > SHOWN:
        lines.append(f"  … and {len(jobs) - SHOWN} more")
    return "\n".join(lines)


def assert_enqueued(
    kind: Any,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    count: int | None = None,
    parked: bool | None = None,
    using: str | None = None,
) -> list[Job]:
    """Assert that a matching job is waiting (exactly ``count`` of them if given); return them.

    Matching as in ``enqueued_jobs`` (``parked=True``: a durable job parked in a sleep or a wait).
    On failure the AssertionError lists the waiting jobs and what differs in each job of that kind.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"count is {count!r}; pass the exact number of matching jobs expected (0 or more), or None")
    kind_name = _kind_name(kind)
    if kind_name is None:
        raise TypeError("assert_enqueued needs a kind; to assert on any job use enqueued_jobs()")
    expected = _expected_args(args)
    if queue is not None and not isinstance(queue, str):
        raise TypeError(f"queue must be a queue name (str) or None, not {queue!r}")
    wanted_parked = _check_parked(parked)
    waiting = _waiting(using)
    matched = [job for job in waiting if not _differences(job, kind_name, expected, queue, wanted_parked)]
    if (count is None and matched) or len(matched) == count:
        return matched
    wanted = "at least 1" if count is None else str(count)
    raise AssertionError(
        f"expected {wanted} waiting {_describe(kind_name, expected, queue, wanted_parked)}, found {len(matched)}\n"
        + _listing(waiting, kind_name, expected, queue, wanted_parked)
    )


def assert_not_enqueued(
    kind: Any = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    parked: bool | None = None,
    using: str | None = None,
) -> None:
    """Assert that no matching job is waiting (``kind`` None: no job at all, of any kind)."""
    kind_name = _kind_name(kind)
    expected = _expected_args(args)
    matched = enqueued_jobs(kind_name, args=expected, queue=queue, parked=parked, using=using)
    if matched:
        raise AssertionError(
            f"expected no waiting {_describe(kind_name, expected, queue, parked)}, found {len(matched)}\n"
            + _listing(matched, None, None, None)
        )
