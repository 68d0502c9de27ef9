"""factory-boy factories for the awa models: rows written through the ORM, bypassing enqueue.

Use them to set up state the enqueue API never produces on its own (a completed job, a queue
with a rate limit); use ``Job.objects.enqueue`` when the enqueue path itself is under test.
"""

from __future__ import annotations

import factory
from django.utils import timezone
from factory.django import DjangoModelFactory

from awa_django.models import Job, JobState, Queue


class JobFactory(DjangoModelFactory):
    class Meta:
        model = Job

    kind = factory.Sequence(lambda n: f"kind-{n}")
    queue = "default"
    args = factory.LazyFunction(dict)
    state = JobState.AVAILABLE
    priority = 2
    max_attempts = 25
    run_at = factory.LazyFunction(timezone.now)

    class Params:
        finished = factory.Trait(state=JobState.COMPLETED, finalized_at=factory.LazyFunction(timezone.now))


class QueueFactory(DjangoModelFactory):
    class Meta:
        model = Queue

    name = factory.Sequence(lambda n: f"queue-{n}")
    max_workers = 50
    min_workers = 0
    weight = 1
