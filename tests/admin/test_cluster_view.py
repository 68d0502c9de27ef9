"""The cluster view: the one global maximum (editable, one row) and each worker's part of it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from awa_django.models import ClusterSettings, Queue, WorkerCapacity


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


@pytest.mark.parametrize(
    ("value", "words"),
    [
        # 0 would cap every worker in cluster scope at 0 running jobs: every queue stops, silently.
        ("0", "global_max_workers 0 is invalid; it must be an integer of at least 1"),
        # Below the queues' guaranteed slots: the rule AWA['GLOBAL_MAX_WORKERS'] is held to (awa.E005).
        ("5", "sum of min_workers (6) exceeds global_max_workers (5)"),
    ],
)
def test_cluster_settings__a_maximum_no_worker_could_run_with_is_a_form_error(
    admin_client_: Client, value: str, words: str
) -> None:
    Queue.objects.create(name="a", min_workers=4)
    Queue.objects.create(name="b", min_workers=2)
    response = admin_client_.post("/admin/awa/clustersettings/add/", {"global_max_workers": value})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors.get("global_max_workers", [])
    assert any(words in str(error) for error in errors), errors
    assert not ClusterSettings.objects.exists()


def test_cluster_settings__a_maximum_that_fits_or_none_is_saved(admin_client_: Client) -> None:
    Queue.objects.create(name="a", min_workers=4)
    response = admin_client_.post("/admin/awa/clustersettings/add/", {"global_max_workers": "4"})
    assert response.status_code == 302
    assert ClusterSettings.objects.get().global_max_workers == 4
    response = admin_client_.post("/admin/awa/clustersettings/1/change/", {"global_max_workers": ""})
    assert response.status_code == 302
    assert ClusterSettings.objects.get().global_max_workers is None
