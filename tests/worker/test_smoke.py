"""A first end-to-end check of the harness: a real worker drains real jobs."""

from __future__ import annotations

import pytest

from awa_django.models import Job
from tests.harness import make_config, running_worker, wait_until


@pytest.mark.django_db(transaction=True)
def test_worker__drains_noop_jobs_in_process() -> None:
    Job.objects.enqueue_many([{"kind": "noop", "queue": "default"} for _ in range(200)])
    with running_worker(make_config(["default"])) as worker:
        wait_until(lambda: Job.objects.completed().count() == 200, what="200 completed jobs")
    assert Job.objects.exclude(state="completed").count() == 0
    assert worker.completer.written == 200
    assert set(Job.objects.values_list("attempt", flat=True)) == {1}
