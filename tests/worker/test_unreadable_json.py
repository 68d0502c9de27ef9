"""A job whose JSON Python cannot load (nested past its recursion limit: jsonb holds any depth;
enqueue refuses args past MAX_JSON_DEPTH, but SQL or another producer may write them) fails on its
own, with an error naming why; the jobs claimed beside it run, and the worker runs on."""

from __future__ import annotations

import pytest
from django.db import connection

from awa_django.models import Job
from awa_django.storable import UnreadableJson, read_json
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import wait_for_row

QUEUE = "deep-json"


def _nest(column: str, job_id: int, depth: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE awa_job SET {column} = jsonb_build_object('a', (repeat('[', %s) || repeat(']', %s))::jsonb)"
            " WHERE id = %s",
            [depth, depth, job_id],
        )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("column", ["args", "metadata"])
def test_worker__a_job_whose_json_nests_past_python_fails_alone_the_others_run(column: str) -> None:
    before = Job.objects.enqueue("noop", queue=QUEUE)
    deep = Job.objects.enqueue("noop", queue=QUEUE)
    after = Job.objects.enqueue("noop", queue=QUEUE)
    _nest(column, deep.pk, 5000)

    with running_worker(make_config([QUEUE])) as worker:
        failed = wait_for_row(deep.pk, state="failed")  # the row loads: its column reads as UnreadableJson
        for job in (before, after):
            wait_for_row(job.pk, state="completed")
        assert not worker.runtime.stop.stopping  # no side task died
        later = Job.objects.enqueue("noop", queue=QUEUE)
        wait_for_row(later.pk, state="completed")

    assert failed.attempt == 1  # failed at once: every attempt would read the same value
    assert isinstance(getattr(failed, column), UnreadableJson)
    (entry,) = failed.errors
    assert f"the job's {column} nest deeper than Python can read" in entry["error"]
    assert "enqueue refuses JSON nested past 100 levels" in entry["error"]


def test_read_json__loads_what_python_can_and_marks_what_it_cannot() -> None:
    assert read_json(b'{"a": [1, 2]}') == {"a": [1, 2]}
    assert read_json('"x"') == "x"
    deep = b"[" * 100_000 + b"]" * 100_000
    marked = read_json(deep)
    assert isinstance(marked, UnreadableJson) and marked.size == len(deep)
    assert "200000 bytes nested too deeply" in repr(marked)


@pytest.mark.django_db
def test_run_jobs__a_job_whose_args_nest_past_python_fails_alone() -> None:
    from awa_django.testing import run_jobs

    deep = Job.objects.enqueue("noop", queue=QUEUE)
    fine = Job.objects.enqueue("noop", queue=QUEUE)
    _nest("args", deep.pk, 5000)

    run_jobs(queue=QUEUE, raise_on_failure=False)

    assert Job.objects.get(pk=fine.pk).state == "completed"
    failed = Job.objects.get(pk=deep.pk)
    assert failed.state == "failed"
    assert "the job's args nest deeper than Python can read" in failed.errors[-1]["error"]


@pytest.mark.django_db
@pytest.mark.parametrize(("value", "named"), [("[1, 2]", "list"), ("7", "int"), ('"x"', "str"), ("true", "bool")])
def test_run_jobs__args_written_as_something_else_than_an_object_fail_the_job_naming_it(value: str, named: str) -> None:
    """A producer past enqueue's checks (SQL) may write args that are no object: the handler is not
    called with no args as if nothing were wrong; the job fails, naming what the args are."""
    from awa_django.testing import run_jobs

    job = Job.objects.enqueue("noop", queue=QUEUE)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa_job SET args = %s::jsonb WHERE id = %s", [value, job.pk])

    run_jobs(queue=QUEUE, raise_on_failure=False)

    failed = Job.objects.get(pk=job.pk)
    assert failed.state == "failed"
    assert f"the job's args are a JSON {named}, not an object" in failed.errors[-1]["error"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("timeout", ["300000 years", "-300000 years"])
def test_worker__a_row_timeout_past_timestamps_range_does_not_stop_its_queue(timeout: str, keyed: bool) -> None:
    """A row's timeout is @job(timeout=)'s, checked at registration; written by SQL it may be any
    interval. One past timestamp's range failed the claim of the whole queue at every poll (the
    deadline now() + timeout out of range): it is capped as read, so its queue runs on."""
    bad = Job.objects.enqueue("noop", queue=QUEUE, fair_key="tenant" if keyed else None)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa_job SET timeout = %s::interval WHERE id = %s", [timeout, bad.pk])
    fine = Job.objects.enqueue("noop", queue=QUEUE, fair_key="tenant" if keyed else None)

    with running_worker(make_config([QUEUE])) as worker:
        wait_for_row(fine.pk, state="completed")
        if timeout.startswith("-"):  # read as 0: its attempt is past its deadline at once
            wait_until(lambda: Job.objects.get(pk=bad.pk).errors, what="the bad row's attempt timed out")
            assert "deadline exceeded" in Job.objects.get(pk=bad.pk).errors[0]["error"]
        else:
            wait_for_row(bad.pk, state="completed")
        assert not worker.runtime.stop.stopping
