"""``context.step``: a completed step never runs again, whatever fails after it, and the job ends
as an uninterrupted run would. In-process attempts (``run_claimed``, the worker's Executor and
writer statements on the test's connection), so a step's record joins the test's transaction."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.exceptions import DuplicateStepError
from awa_django.models import Job
from awa_django.worker import JobContext
from tests.durable.support import registry_of, run_once, state_of, steps_of

KIND = "durable.steps"
QUEUE = "durable"

texts = st.text(st.characters(exclude_characters="\x00"), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)


class InjectedError(Exception):
    pass


completed: Counter[tuple[int, str]] = Counter()  # (job id, step name): times its function returned
called: Counter[tuple[int, str]] = Counter()  # ...: times its function was called


def _steps_handler(context: JobContext, values: list[Any], failures: list[list[Any]]) -> Any:
    """Runs step i returning values[i], after failing where ``failures`` says for this attempt:
    [attempt, "before" | "inside", i] raises before step i, or inside its function."""
    fail = {(attempt, where, at) for attempt, where, at in failures}
    results = []
    for i, value in enumerate(values):
        if (context.attempt, "before", i) in fail:
            raise InjectedError(f"before step {i}")

        def work(i: int = i, value: Any = value) -> Any:
            called[(context.job_id, f"s{i}")] += 1
            if (context.attempt, "inside", i) in fail:
                raise InjectedError(f"inside step {i}")
            completed[(context.job_id, f"s{i}")] += 1
            return {"i": i, "value": value}

        results.append(context.step(f"s{i}", work))
    if (context.attempt, "before", len(values)) in fail:
        raise InjectedError("after the last step")
    return results


@pytest.mark.django_db
def test_step__random_failures_and_retries__each_completed_step_ran_once_and_result_as_uninterrupted() -> None:
    registry = registry_of(KIND, _steps_handler, queue=QUEUE)

    @settings(max_examples=40)
    @given(
        values=st.lists(json_values, max_size=6),
        failures=st.lists(st.tuples(st.sampled_from(["before", "inside"]), st.integers(0, 6)), max_size=5),
    )
    def check(values: list[Any], failures: list[tuple[str, int]]) -> None:
        # Attempt n fails as failures[n - 1] says (if that point is reached); attempt len+1 runs clean.
        plan = [[n + 1, where, at] for n, (where, at) in enumerate(failures)]
        job = Job.objects.enqueue(KIND, {"values": values, "failures": plan}, queue=QUEUE, max_attempts=len(plan) + 1)
        attempts = 0
        while state_of(job.id) != "completed":
            run = run_once(job.id, registry)
            assert run is not None, f"job {job.id} not claimable in state {state_of(job.id)}"
            attempts += 1
            assert attempts <= len(plan) + 1, f"job {job.id} did not complete: {run}"
        uninterrupted = [{"i": i, "value": value} for i, value in enumerate(values)]
        assert Job.objects.get(id=job.id).result == uninterrupted
        for i in range(len(values)):
            assert completed[(job.id, f"s{i}")] == 1, (i, values, plan)
        assert set(steps_of(job.id)) == {f"s{i}" for i in range(len(values))}

    check()


def _twice(context: JobContext) -> None:
    context.step("charge", lambda: 1)
    context.step("charge", lambda: 2)


@pytest.mark.django_db
def test_step__name_used_twice_in_one_run__fails_naming_it() -> None:
    job = Job.objects.enqueue("durable.twice", {}, queue=QUEUE)
    run = run_once(job.id, registry_of("durable.twice", _twice))
    assert run is not None
    assert run.state == "failed"
    assert run.error is not None
    assert DuplicateStepError.__name__ in run.error["error"]
    assert "step 'charge'" in run.error["error"]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (object(), "cannot be stored as JSON"),
        ({"a": "x\x00y"}, "NUL"),
        (["\udcff"], "surrogate"),
        (float("nan"), "cannot be stored as JSON"),
    ],
)
@pytest.mark.django_db
def test_step__unstorable_result__fails_the_job_naming_the_step_and_the_value(value: Any, says: str) -> None:
    ran: list[int] = []

    def make() -> Any:
        ran.append(1)
        return value

    def handler(context: JobContext) -> None:
        context.step("make", make)

    job = Job.objects.enqueue("durable.unstorable", {}, queue=QUEUE)
    run = run_once(job.id, registry_of("durable.unstorable", handler))
    assert run is not None
    assert run.state == "failed"
    assert run.error is not None
    assert "step 'make'" in run.error["error"] and says in run.error["error"], run.error["error"]
    assert steps_of(job.id) == {}
    assert ran == [1]


@pytest.mark.django_db
def test_step__code_changed__removed_step_ignored_and_new_step_before_old_ones_runs() -> None:
    """Steps match by name: a stored step the code no longer reaches is ignored (kept), a new one
    runs the first time it is reached, wherever it is, and the old ones keep their results."""
    calls: list[str] = []
    version = {"n": 1}

    def call(name: str, result: str) -> str:
        calls.append(name)
        return result

    def handler(context: JobContext) -> Any:
        if version["n"] == 1:
            a = context.step("a", call, "a", "A")
            b = context.step("b", call, "b", "B")
            raise InjectedError(f"after {a}{b}")
        new = context.step("new", call, "new", "N")
        b = context.step("b", call, "b2", "B2")
        return [new, b]

    registry = registry_of("durable.versions", handler)
    job = Job.objects.enqueue("durable.versions", {}, queue=QUEUE)
    assert run_once(job.id, registry).state == "retryable"  # type: ignore[union-attr]
    version["n"] = 2
    run = run_once(job.id, registry)
    assert run is not None and run.state == "completed", run
    assert run.result == ["N", "B"]
    assert calls == ["a", "b", "new"]
    assert set(steps_of(job.id)) == {"a", "b", "new"}
