"""Guaranteed slots that cannot fit in the global maximum are refused before a worker starts,
with a message naming both numbers."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from awa_django.concurrency import Allocator, QueueLimits
from awa_django.exceptions import MinWorkersExceedGlobalError
from awa_django.models import Queue
from awa_django.worker import QueueConfig, WorkerConfig
from awa_django.worker.supervisor import Worker


def test_worker_config__min_workers_over_global_max_is_refused() -> None:
    queues = {"A": QueueConfig("A", min_workers=15), "B": QueueConfig("B", min_workers=10)}
    with pytest.raises(MinWorkersExceedGlobalError) as info:
        WorkerConfig(queues=queues, global_max_workers=20)
    assert (info.value.sum_min_workers, info.value.global_max_workers) == (25, 20)
    assert "(25)" in str(info.value) and "(20)" in str(info.value)


def test_allocator__min_workers_over_global_max_is_refused() -> None:
    with pytest.raises(MinWorkersExceedGlobalError) as info:
        Allocator(20, {"A": QueueLimits(min_workers=15), "B": QueueLimits(min_workers=10)})
    assert (info.value.sum_min_workers, info.value.global_max_workers) == (25, 20)
    assert "(25)" in str(info.value) and "(20)" in str(info.value)


def test_worker_config__min_workers_equal_to_global_max_is_accepted() -> None:
    config = WorkerConfig(
        queues={"A": QueueConfig("A", min_workers=10), "B": QueueConfig("B", min_workers=10)}, global_max_workers=20
    )
    assert config.mode == "weighted"


@pytest.mark.django_db(transaction=True)
def test_awa_worker_command__min_workers_over_global_max_is_a_command_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async def must_not_run(self: Worker) -> None:
        raise AssertionError("the worker started despite an invalid configuration")

    monkeypatch.setattr(Worker, "run", must_not_run)
    Queue.objects.create(name="A", min_workers=15)
    Queue.objects.create(name="B", min_workers=10)
    with pytest.raises(CommandError) as info:
        call_command("awa_worker", "--global-max-workers", "20", verbosity=0)
    message = str(info.value)
    assert "25" in message and "20" in message, message
    assert "min_workers" in message, message


@pytest.mark.django_db(transaction=True)
def test_awa_worker_command__named_queues_over_global_max_is_a_command_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async def must_not_run(self: Worker) -> None:
        raise AssertionError("the worker started despite an invalid configuration")

    monkeypatch.setattr(Worker, "run", must_not_run)
    Queue.objects.create(name="A", min_workers=15)
    Queue.objects.create(name="B", min_workers=10)
    with pytest.raises(CommandError) as info:
        call_command("awa_worker", "-q", "A", "-q", "B", "--global-max-workers", "20", verbosity=0)
    assert "(25)" in str(info.value) and "(20)" in str(info.value)
