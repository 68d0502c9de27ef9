"""assert_enqueued / assert_not_enqueued / enqueued_jobs: what is waiting, and a clear diff when not."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from awa_django.models import Job
from awa_django.testing import assert_enqueued, assert_not_enqueued, enqueued_jobs, run_jobs
from tests.factories import JobFactory
from tests.testing import jobs

pytestmark = pytest.mark.django_db


def test_assert_enqueued__matches_kind_args_subset_and_queue():
    job = Job.objects.enqueue("testing.add", {"a": 1, "b": 2}, queue="math")

    assert assert_enqueued("testing.add") == [job]
    assert assert_enqueued("testing.add", args={"a": 1}) == [job]  # a subset of the args
    assert assert_enqueued(jobs.add, args={"a": 1, "b": 2}, queue="math", count=1) == [job]


def test_assert_enqueued__counts_waiting_states_only():
    available = Job.objects.enqueue("testing.add", {"a": 1, "b": 0})
    scheduled = Job.objects.enqueue("testing.add", {"a": 2, "b": 0}, run_at=timezone.now() + timedelta(hours=1))
    flaky = Job.objects.enqueue("testing.flaky", {"fail_attempts": 1})
    run_jobs(kind="testing.flaky", raise_on_failure=False)  # now retryable: still waiting

    assert assert_enqueued("testing.add", count=2) == [available, scheduled]
    assert_enqueued("testing.flaky", count=1)
    run_jobs(kind="testing.add")  # the available one completes: no longer enqueued
    assert assert_enqueued("testing.add", count=1) == [scheduled]
    assert flaky.pk in [job.pk for job in enqueued_jobs()]


def test_assert_enqueued__failure_lists_what_is_waiting_and_what_differs():
    Job.objects.enqueue("testing.add", {"a": 1, "b": 2}, queue="math")
    JobFactory(kind="testing.add", args={"b": 2})  # add(a, b) without a: enqueue refuses it, a row can hold it
    Job.objects.enqueue("testing.cancel")

    with pytest.raises(AssertionError) as raised:
        assert_enqueued("testing.add", args={"a": 3, "b": 2}, queue="math")

    message = str(raised.value)
    assert message.startswith(
        "expected at least 1 waiting job of kind 'testing.add' with args including {'a': 3, 'b': 2} "
        "on queue 'math', found 0\nwaiting jobs (3):\n"
    )
    assert (
        "'testing.add' queue='math' args={'a': 1, 'b': 2} state=available\n      args['a']: expected 3, got 1"
        in message
    )
    assert "queue: expected 'math', got 'default'\n      args['a']: expected 3, missing" in message
    assert "'testing.cancel' queue='default' args={} state=available" in message
    assert "expected 'math'" not in message.split("'testing.cancel'")[1]  # other kinds are listed, not diffed


def test_assert_enqueued__wrong_count_fails_with_the_count():
    Job.objects.enqueue("testing.add", {"a": 1, "b": 0})
    Job.objects.enqueue("testing.add", {"a": 1, "b": 0})
    with pytest.raises(AssertionError, match=r"^expected 1 waiting job of kind 'testing.add', found 2\n"):
        assert_enqueued("testing.add", count=1)
    assert_enqueued("testing.cancel", count=0)


def test_assert_enqueued__nothing_waiting_says_so():
    nothing = r"found 0\nno job is waiting \(scheduled, available, retryable, or parked in a wait\)$"
    with pytest.raises(AssertionError, match=nothing):
        assert_enqueued("testing.add")


def test_assert_enqueued__args_compare_as_stored_json():
    JobFactory(kind="testing.add", args={"a": [1, 2], "b": 0})  # a list for add's a: int, as a row only
    assert_enqueued("testing.add", args={"a": (1, 2)})  # a tuple is stored as a JSON list
    with pytest.raises(AssertionError, match=r"args\['a'\]: expected \[2, 1\], got \[1, 2\]"):
        assert_enqueued("testing.add", args={"a": [2, 1]})


def test_assert_not_enqueued__passes_and_fails_with_the_matches():
    job = Job.objects.enqueue("testing.add", {"a": 1, "b": 0})
    assert_not_enqueued("testing.add", args={"a": 2})
    assert_not_enqueued("testing.cancel")
    with pytest.raises(AssertionError) as raised:
        assert_not_enqueued("testing.add")
    assert str(raised.value) == (
        "expected no waiting job of kind 'testing.add', found 1\n"
        f"waiting jobs (1):\n  #{job.pk} 'testing.add' queue='default' args={{'a': 1, 'b': 0}} state=available"
    )
    with pytest.raises(AssertionError, match=r"^expected no waiting job, found 1"):
        assert_not_enqueued()


def test_enqueued_jobs__filters_for_custom_assertions():
    first = Job.objects.enqueue("testing.add", {"a": 1, "b": 0}, queue="math")
    second = Job.objects.enqueue("testing.add", {"a": 2, "b": 0})
    assert enqueued_jobs() == [first, second]
    assert enqueued_jobs("testing.add", queue="math") == [first]
    assert enqueued_jobs(args={"a": 2}) == [second]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: assert_enqueued("testing.add", count=-1), ValueError, r"count is -1; pass the exact number"),
        (lambda: assert_enqueued("testing.add", args=[1]), TypeError, r"args must be a dict .*, not \[1\]"),  # type: ignore[arg-type]
        (lambda: assert_enqueued("testing.add", args={"a": {1, 2}}), TypeError, r"cannot be compared with stored"),
        (lambda: assert_enqueued(None), TypeError, r"assert_enqueued needs a kind; .*enqueued_jobs\(\)"),
        (lambda: assert_enqueued(3.5), TypeError, r"kind must be a job kind string, .* not 3.5"),
        (lambda: enqueued_jobs(queue=7), TypeError, r"queue must be a queue name \(str\) or None, not 7"),  # type: ignore[arg-type]
    ],
)
def test_assertions__bad_arguments_are_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()
