"""A workflow step's fairness key: its own, else its kind's rule, as at enqueue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job
from awa_django.registry import job, registry
from awa_django.workflows import Workflow

KIND = "test_wf_keyed"


@pytest.fixture
def keyed_kind() -> Iterator[str]:
    @job(KIND, fair_key=lambda args: f"tenant:{args['tenant']}")
    def keyed(tenant: int) -> None: ...

    try:
        yield KIND
    finally:
        registry.unregister(KIND)


@pytest.mark.django_db
def test_workflow_steps__keep_their_key_or_take_their_kinds_rule(keyed_kind: str) -> None:
    wf = Workflow("keys")
    first = wf.add(keyed_kind, {"tenant": 7})
    second = wf.add(keyed_kind, {"tenant": 8}, after=[first], fair_key="vip")
    wf.add("plain_kind", {}, after=[second])
    wf.enqueue()
    keys = list(Job.objects.filter(workflow_id__isnull=False).order_by("id").values_list("fair_key", flat=True))
    assert keys == ["tenant:7", "vip", ""]


@pytest.mark.django_db
def test_workflow_steps__a_bad_key_is_refused_before_anything_is_written() -> None:
    bad = Workflow("bad")
    bad.add("plain_kind", {}, fair_key="x" * 129)
    with pytest.raises(InvalidJobError, match="fair_key"):
        bad.enqueue()
    assert not Job.objects.exists()
