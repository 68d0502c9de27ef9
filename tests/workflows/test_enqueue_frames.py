"""A workflow's steps are validated as one ``build_row`` per step would validate them, though steps
of one kind and options share the first one's validated COPY frame: the same refusals (field, index,
message), and the same rows written, for any mix of good and bad steps."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.exceptions import InvalidJobError
from awa_django.jobspec import build_row
from awa_django.managers import kind_defaults
from awa_django.models import Job
from awa_django.registry import job
from awa_django.workflows import Workflow

pytestmark = pytest.mark.django_db


@job("wf.frames_keyed", fair_key=lambda args: f"tenant:{args['tenant']}", timeout=30)
def keyed(tenant: int = 0) -> None:
    """A kind whose fairness key is derived from its args, with a timeout of its own."""


@job("wf.frames_typed", queue="typed", priority=3, max_attempts=4)
def typed(n: int) -> None:
    """A kind whose args are checked against its signature (``n`` required, an int)."""


KINDS = ["wf.frames_keyed", "wf.frames_typed", "noop", "unregistered_kind"]
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "queue": st.sampled_from(["a", "b", "", "q" * 300]),
        "priority": st.sampled_from([1, 2, 4, 0, 5, True]),
        "max_attempts": st.sampled_from([1, 3, 0, False]),
        "fair_key": st.sampled_from(["", "k", "x" * 200]),
    },
)
ARGS = st.one_of(
    st.none(),
    st.just({}),
    st.fixed_dictionaries({"n": st.sampled_from([1, "1", float("nan")])}),
    st.fixed_dictionaries({"tenant": st.integers(0, 3)}),
    st.just({"other": 1}),
    st.just("not a dict"),
)
STEPS = st.lists(st.tuples(st.sampled_from(KINDS), ARGS, OPTIONS), min_size=1, max_size=6)


def reference(index: int, kind: str, args: Any, options: dict[str, Any]) -> tuple[Any, ...]:
    """The step validated whole, as enqueue validates a job: the row it writes, or the error."""
    defaults = kind_defaults(kind)
    row = build_row(
        kind,
        args,
        queue=options.get("queue", defaults.queue),
        priority=options.get("priority", defaults.priority),
        max_attempts=options.get("max_attempts", defaults.max_attempts),
        index=index,
    )
    fair_key = defaults.fair_key_for(row.kind, options.get("fair_key"), row.args, index)
    if defaults.args_check is not None:
        defaults.args_check.check(row.kind, row.args, index)
    return row.kind, row.queue, row.args, row.priority, row.max_attempts, fair_key, defaults.timeout


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, chained=st.booleans())
def test_workflow_enqueue__shared_frames_validate_and_write_as_build_row(
    steps: list[tuple[str, Any, dict[str, Any]]], chained: bool
) -> None:
    expected: list[tuple[Any, ...]] = []
    refusal: InvalidJobError | None = None
    for index, (kind, args, options) in enumerate(steps):
        try:
            expected.append(reference(index, kind, args, options))
        except InvalidJobError as exc:
            refusal = exc
            break
    wf = Workflow("frames")
    previous = None
    for kind, args, options in steps:
        previous = wf.add(kind, args, after=[previous] if chained and previous is not None else [], **options)

    with transaction.atomic():
        if refusal is not None:
            with pytest.raises(InvalidJobError) as raised:
                wf.enqueue()
            assert (raised.value.field, raised.value.index, str(raised.value)) == (
                refusal.field,
                refusal.index,
                str(refusal),
            )
            return
        wf.enqueue()
        assert wf.id is not None
        rows = Job.objects.filter(workflow_id=wf.id).order_by("id")
        written = [
            (j.kind, j.queue, j.args, j.priority, j.max_attempts, j.fair_key, j.timeout, j.attempt) for j in rows
        ]
        assert written == [(*e, 0) for e in expected]
        states = [j.state for j in rows]
        assert states == (["available"] + ["waiting"] * (len(steps) - 1) if chained else ["available"] * len(steps))
        transaction.set_rollback(True)


def test_reference__a_derived_key_and_timeout_are_what_the_kind_says() -> None:
    # The reference itself applies the kind's rules: a rule-derived key and the kind's timeout.
    assert reference(0, "wf.frames_keyed", {"tenant": 2}, {})[5:] == ("tenant:2", timedelta(seconds=30))
    with pytest.raises(InvalidJobError, match="missing required"):
        reference(0, "wf.frames_typed", {}, {})
