"""A queue's rate limit paces job starts, in both concurrency modes."""

from __future__ import annotations

import pytest

from awa_django.models import Job, Queue
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker
from tests.weighted.support import Recorder, enqueue, wait_all_finished

# 10 jobs/s with a burst of 10: the first 10 start at once, the other 20 one per 100 ms, so the
# last starts about 2.0 s after the first. Only the lower bound is asserted (load can only slow
# starts down); 1.5 s leaves room for the first job's own start delay after its token was taken.
LOWER_BOUND = 1.5


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("global_max_workers", [None, 10], ids=["hard_reserved", "weighted"])
def test_rate_limit__30_jobs_at_10_per_second_take_about_2s(global_max_workers: int | None) -> None:
    # The row matches the configuration: the worker re-reads it every reconfigure_interval.
    Queue.objects.create(name="A", rate_limit=10, rate_burst=10)
    config = make_config({"A": QueueConfig("A", rate_limit=10, rate_burst=10)}, global_max_workers=global_max_workers)
    recorder = Recorder()
    with running_worker(config, registry=recorder.registry):
        enqueue("A", 30, ms=0)
        wait_all_finished(["A"])
    starts = sorted(recorder.started("A"))
    spread = starts[-1] - starts[0]
    assert Job.objects.filter(queue="A", state="completed").count() == 30
    assert len(starts) == 30
    assert spread >= LOWER_BOUND
