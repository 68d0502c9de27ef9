"""Values Postgres refuses (NUL characters, unpaired surrogates) in what a handler returns, raises
or reports as progress: the job fails with a readable error, and the worker runs on.

Before, one such value failed the batched write with a DataError, killed the writer (or the
heartbeat), and the worker stopped working and could not be stopped. Each case runs the demo
``poison`` handlers (async and sync) on a real worker, then a canary job on the same worker.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest

from awa_django.context import COMPLETED, ClaimedJob, Outcome
from awa_django.models import Job
from awa_django.states import JobState
from awa_django.storable import UnstorableValueError, escape_text, to_json
from awa_django.worker.completer import Completer
from awa_django.worker.db import make_pool
from tests.harness import make_config, running_worker
from tests.worker.support import Spawner, bring_forward, state_counts, wait_for_row

QUEUE = "poison"

# shape -> what the job's error must say (readable: the bad character escaped, where it was)
SHAPES = {
    "result_nul": "the handler's return value['data'] contains a NUL character (\\x00) at index 3",
    "result_surrogate": "the handler's return value contains a lone surrogate (\\ud800) at index 0",
    "raise_nul": "ValueError: \\x00",
    "raise_surrogate": "ValueError: \\udcff",
    "progress_nul": "the progress value['s'] contains a NUL character (\\x00) at index 1",
}


def _assert_failed_readably(job: Job, expected: str) -> None:
    assert job.state == "failed", (job.state, job.errors)
    assert len(job.errors) == 1, job.errors
    error = job.errors[0]["error"]
    assert expected in error, error
    assert "\x00" not in json.dumps(job.errors)
    assert job.result is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["poison", "poison_sync"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_poison__value_postgres_refuses__job_fails_readably_and_a_canary_completes(kind: str, shape: str) -> None:
    with running_worker(make_config([QUEUE])) as worker:
        bad = Job.objects.enqueue(kind, {"shape": shape}, queue=QUEUE, max_attempts=1)
        failed = wait_for_row(bad.pk, state="failed")
        canary = Job.objects.enqueue("noop", {}, queue=QUEUE)
        wait_for_row(canary.pk, state="completed")
        assert worker.failure is None
    # Counted once the stopped worker's writer has answered every write: the canary's row can be
    # read as committed a moment before its writer counts it.
    assert worker.completer.written == 2
    _assert_failed_readably(failed, SHAPES[shape])
    if shape.startswith("raise_"):  # the traceback is kept, escaped
        assert "ValueError" in failed.errors[0]["traceback"]
        assert failed.errors[0]["exception"] == "builtins.ValueError"


BASE_EXCEPTIONS = {
    "system_exit": "the handler raised SystemExit: 3; recorded as this attempt's failure (the worker runs on)",
    "keyboard_interrupt": "the handler raised KeyboardInterrupt; recorded as this attempt's failure",
    "generator_exit": "the handler raised GeneratorExit; recorded as this attempt's failure",
    "cancelled_error": "the handler raised asyncio.exceptions.CancelledError itself (nothing cancelled it)",
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["poison", "poison_sync"])
@pytest.mark.parametrize("shape", list(BASE_EXCEPTIONS))
def test_base_exception__raised_by_a_handler__job_fails_and_the_worker_runs_on(kind: str, shape: str) -> None:
    with running_worker(make_config([QUEUE])) as worker:
        bad = Job.objects.enqueue(kind, {"shape": shape}, queue=QUEUE, max_attempts=2)
        retried = wait_for_row(bad.pk, state="retryable")  # an attempt's failure, retried like any
        bring_forward(bad.pk)
        failed = wait_for_row(bad.pk, state="failed")
        canary = Job.objects.enqueue("noop", {}, queue=QUEUE)
        wait_for_row(canary.pk, state="completed")
        assert worker.failure is None
        assert not worker.stopping
    assert retried.errors[0]["attempt"] == 1
    assert [e["attempt"] for e in failed.errors] == [1, 2]
    assert BASE_EXCEPTIONS[shape] in failed.errors[-1]["error"], failed.errors


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_poison__subprocess_worker__every_shape_fails_alone_and_sigterm_still_exits_0(spawn: Spawner) -> None:
    shapes = [*SHAPES, *BASE_EXCEPTIONS]
    worker = spawn("-q", QUEUE, "--poll-interval", "0.5", "--shutdown-timeout", "5", name="poisoned")
    bad = [
        Job.objects.enqueue(kind, {"shape": shape}, queue=QUEUE, max_attempts=1).pk
        for kind in ("poison", "poison_sync")
        for shape in shapes
    ]
    for pk in bad:
        wait_for_row(pk, timeout=60, state="failed")
    canary = Job.objects.enqueue("noop", {}, queue=QUEUE)
    wait_for_row(canary.pk, timeout=60, state="completed")
    worker.assert_alive()

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=30) == 0, worker.log[-4000:]
    assert state_counts() == {"failed": len(bad), "completed": 1}
    assert "side task" not in worker.log, worker.log[-4000:]


# --- the writer's last line: a batch the database still refuses is split ---------------------


def _running_rows(count: int) -> list[ClaimedJob]:
    Job.objects.enqueue_many([{"kind": "noop", "queue": QUEUE} for _ in range(count)])
    Job.objects.filter(queue=QUEUE).update(state="running", attempt=1, run_lease=1)
    return [
        ClaimedJob(pk, "noop", QUEUE, {}, 1, 25, 1, 2, {})
        for pk in Job.objects.filter(queue=QUEUE).order_by("pk").values_list("pk", flat=True)
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("poisoned_at", [0, 6, 12])
def test_completer__batch_refused_by_the_database__split_until_the_poison_row_fails_alone(poisoned_at: int) -> None:
    jobs = _running_rows(13)
    poison = jobs[poisoned_at]
    # Past every check: a result the database refuses (JSON-escaped NUL), as a bug might submit.
    refused = Outcome(JobState.COMPLETED, result=json.dumps({"data": "a\x00b"}))
    failing = Outcome(JobState.RETRYABLE, delay=0.0, error={"error": "ordinary failure", "attempt": 1, "at": "now"})

    async def scenario() -> list[bool]:
        pool = make_pool("default", 2)
        await pool.open(wait=True, timeout=10)
        completer = Completer(pool)
        writer = asyncio.create_task(completer.run())
        try:
            futures = [
                completer.submit(job, refused if job is poison else failing if job.id % 2 else COMPLETED)
                for job in jobs
            ]
            return list(await asyncio.wait_for(asyncio.gather(*futures), 30))
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            await pool.close()

    assert asyncio.run(scenario()) == [True] * len(jobs)
    rows = {job.pk: job for job in Job.objects.filter(queue=QUEUE)}
    bad = rows.pop(poison.id)
    assert bad.state == "failed"
    assert "could not store this attempt's outcome (completed)" in bad.errors[0]["error"]
    assert "UntranslatableCharacter" in bad.errors[0]["error"], bad.errors
    for pk, job in rows.items():
        assert job.state == ("retryable" if pk % 2 else "completed"), (pk, job.state)


def test_to_json__names_the_path_and_the_character() -> None:
    with pytest.raises(
        UnstorableValueError, match=r"value\['a'\]\[1\]\['k'\] contains a NUL character \(\\x00\) at index 2"
    ):
        to_json({"a": [0, {"k": "xy\x00"}]}, "value")
    with pytest.raises(UnstorableValueError, match=r"a key of value \('k\\\\udcff'\) contains a lone surrogate"):
        to_json({"k\udcff": 1}, "value")
    with pytest.raises(UnstorableValueError, match=r"cannot be stored as JSON \(float: Out of range float values"):
        to_json(float("nan"), "value")
    # Storable values pass, a valid surrogate pair (an emoji) and a literal backslash-u included.
    for value in ["😀", "C:\\udir", {"a": ["\\u0000"]}, None, 1.5]:
        assert json.loads(to_json(value, "value")) == value


@pytest.mark.django_db(transaction=True)
def test_escape_text__what_postgres_refuses_is_escaped_and_stores() -> None:
    value: Any = {"error": "a\x00b\ud800c😀"}
    escaped = {"error": escape_text(value["error"])}
    assert escaped == {"error": "a\\x00b\\ud800c😀"}
    job = Job.objects.enqueue("noop", {}, queue=QUEUE)
    Job.objects.filter(pk=job.pk).update(metadata=escaped)  # Postgres takes it as it is
    job.refresh_from_db()
    assert job.metadata == escaped
