"""The cluster view: the one global maximum (editable, one row) and each worker's part of it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from awa_django.models import ClusterSettings, WorkerCapacity


@pytest.fixture
def admin_client_(db: None) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_cluster_settings__shows_the_value_in_force_and_says_when_workers_disagree(admin_client_: Client) -> None:
    ClusterSettings.objects.create(global_max_workers=12)
    now = timezone.now()
    WorkerCapacity.objects.create(instance_id=uuid.uuid4(), global_max_workers=12, reported_at=now)
    WorkerCapacity.objects.create(instance_id=uuid.uuid4(), global_max_workers=10, reported_at=now)
    html = admin_client_.get("/admin/awa/clustersettings/").content.decode()
    assert "10 (workers disagree: [10, 12]" in html
    assert admin_client_.get("/admin/awa/clustersettings/add/").status_code == 403  # one row only


def test_worker_capacity__lists_each_worker_s_part_per_queue(admin_client_: Client) -> None:
    WorkerCapacity.objects.create(
        instance_id=uuid.uuid4(),
        use={"A": {"held": 3, "demand": 24}},
        applied={"A": 4},
        caps={"A": 5},
        floors={"A": 1},
        reported_at=timezone.now(),
        lease_until=timezone.now() + timedelta(seconds=30),
    )
    html = admin_client_.get("/admin/awa/workercapacity/").content.decode()
    assert "A: 3 / 24 / 4 / 5 / 1" in html
    assert "s left" in html
