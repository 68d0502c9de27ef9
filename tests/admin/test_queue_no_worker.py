"""The admin queue list flags a queue whose jobs wait and that no live worker serves."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from awa_django.models import Job, WorkerInstance
from tests.factories import QueueFactory


def row_of(html: str, name: str) -> str:
    match = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*>{name}</a>(?:(?!</tr>).)*</tr>", html, re.S)
    assert match, f"no changelist row for {name}"
    return match.group(0)


@pytest.mark.django_db
def test_queue_changelist__waiting_jobs_and_no_worker__flagged_only_where_it_matters() -> None:
    for name in ("emails", "served", "idle"):
        QueueFactory(name=name)
    QueueFactory(name="paused", paused=True)
    for name in ("emails", "emails", "served", "paused"):
        Job.objects.enqueue("x", queue=name)
    now = timezone.now()
    WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="box", pid=1, started_at=now, last_seen_at=now, mode="hard_reserved",
        queues={"served": {"mode": "hard_reserved", "capacity": {"type": "HardReserved", "max_workers": 50},
                           "in_flight": 0, "available": 50, "paused": False}},
        flags={"stopping": False},
    )  # fmt: skip
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))

    html = client.get(reverse("admin:awa_queue_changelist")).content.decode()

    assert 'class="field-mode"><span class="awa-bad">no live worker, 2 waiting</span><' in row_of(html, "emails")
    assert 'class="field-mode">hard-reserved<' in row_of(html, "served")
    assert 'class="field-mode">no live worker<' in row_of(html, "idle")  # nothing waits: no alarm
    assert 'class="field-mode">no live worker<' in row_of(html, "paused")  # waiting is intended
