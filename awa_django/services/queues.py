"""Queue actions: pause and resume queues by name (the admin's actions and your code)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from awa_django.models import Queue
from awa_django.services.db import database_alias


def pause_queues(names: Iterable[str]) -> int:
    """Pause queues (workers stop claiming from them); return how many were not paused before.

    A name without a ``Queue`` row gets one, paused, with the default settings. Every write to
    awa_queue is announced to the running workers by a trigger, so they apply it at once.
    """
    wanted = sorted(set(names))
    if not wanted:
        return 0
    alias = database_alias()
    with transaction.atomic(using=alias):
        changed = (
            Queue.objects.using(alias)
            .filter(name__in=wanted, paused=False)
            .update(paused=True, updated_at=timezone.now())
        )
        existing = set(Queue.objects.using(alias).filter(name__in=wanted).values_list("name", flat=True))
        missing = [Queue(name=name, paused=True) for name in wanted if name not in existing]
        created = Queue.objects.using(alias).bulk_create(missing, ignore_conflicts=True) if missing else []
    return changed + len(created)


def resume_queues(names: Iterable[str]) -> int:
    """Resume paused queues; return how many were paused before."""
    wanted = sorted(set(names))
    if not wanted:
        return 0
    return (
        Queue.objects.using(database_alias())
        .filter(name__in=wanted, paused=True)
        .update(paused=False, updated_at=timezone.now())
    )
