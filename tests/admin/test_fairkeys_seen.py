"""Seeing the fair keys: a queue's keys page (top keys by backlog and by running, each with its
weight, cap and share in force), ``awa_health --json`` and the depth view's ``awa_queue_key_jobs``
(the top ``FAIR_KEYS_TOP`` keys by name, the rest as ``key="other"``), all checked against the rows."""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from awa_django.concurrency.waterfill import water_fill
from awa_django.models import FairKey, Job, WorkerInstance
from awa_django.services.keys import KEYS_SHOWN, KeySettings, queue_keys, shares_in_force, top_keys
from tests.admin.conftest import client_for
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db


def load(queue: str, available: dict[str, int], running: dict[str, int] | None = None) -> None:
    """Jobs of ``queue``: ``available[key]`` available and ``running[key]`` running ones per key."""
    specs: list[dict[str, Any]] = []
    for key, n in available.items():
        specs += [{"kind": "noop", "queue": queue, "fair_key": key}] * n
    for key, n in (running or {}).items():
        specs += [{"kind": "noop", "queue": queue, "fair_key": key, "tags": ["run"]}] * n
    Job.objects.enqueue_many(specs)
    Job.objects.filter(queue=queue, tags__contains=["run"]).update(state="running", attempt=1)


def counted(queue: str, state: str) -> Counter[str]:
    return Counter(Job.objects.filter(queue=queue, state=state).values_list("fair_key", flat=True))


# --- the service ------------------------------------------------------------------------------


def test_queue_keys__tops_totals_and_shares_match_the_rows_and_water_fill() -> None:
    QueueFactory(name="tenants", max_workers=6, key_weight=1, key_max_running=4)
    FairKey.objects.create(queue="tenants", key="big", weight=3)
    FairKey.objects.create(queue="tenants", key="small", max_running=1)
    available = {"big": 30, "small": 5, "": 2, **{f"t{n}": 1 for n in range(25)}}
    load("tenants", available, running={"big": 2, "idle-but-running": 1})

    keys = queue_keys("tenants")

    assert (keys.slots, keys.slots_source) == (6, "no live worker serves it: its max_workers")
    assert (keys.available, keys.running) == (sum(available.values()), 3)
    assert keys.active_keys == len(available) + 1 and keys.contending_keys == len(available)
    assert [r.key for r in keys.by_backlog][:3] == ["big", "small", ""]
    assert len(keys.by_backlog) == KEYS_SHOWN
    assert [(r.key, r.running) for r in keys.by_running] == [("big", 2), ("idle-but-running", 1)]
    big = keys.by_backlog[0]
    assert (big.available, big.running, big.weight, big.cap) == (30, 2, 3, 4)
    assert (keys.by_backlog[1].weight, keys.by_backlog[1].cap) == (1, 1)
    weights = {k: (3 if k == "big" else 1) for k in available}
    caps: dict[str, float | None] = {}
    for key, n in available.items():
        cap = 1 if key == "small" else 4
        caps[key] = float(min(cap, n + (2 if key == "big" else 0)))  # by its cap and what it could run
    expected = water_fill(6, weights, caps)
    for row in keys.by_backlog:
        assert row.share is not None and math.isclose(row.share, expected[row.key]), row
    assert keys.by_running[1].share is None  # running only: it does not contend for a slot
    assert math.isclose(sum(expected.values()), 6)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.dictionaries(
        st.text("abc", max_size=3), st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=8
    ),
    slots=st.integers(0, 12),
    cap=st.one_of(st.none(), st.integers(1, 4)),
)
def test_shares_in_force__never_above_a_cap_or_what_a_key_could_run_and_work_conserving(
    counts: dict[str, tuple[int, int]], slots: int, cap: int | None
) -> None:
    shares = shares_in_force(slots, counts, KeySettings(default_max_running=cap))

    assert set(shares) == {k for k, (a, _) in counts.items() if a > 0}
    usable = {k: a + r if cap is None else min(cap, a + r) for k, (a, r) in counts.items() if a > 0}
    for key, share in shares.items():
        assert -1e-9 <= share <= usable[key] + 1e-9
    assert math.isclose(sum(shares.values()), min(slots, sum(usable.values())), abs_tol=1e-9)


@pytest.mark.parametrize("top", [1, 3, 10])
def test_top_keys__names_the_top_and_sums_the_rest_as_other(top: int) -> None:
    available = {f"k{n:02d}": n + 1 for n in range(12)}
    load("wide", available, running={"k00": 1, "k01": 2})
    load("narrow", {"only": 2})

    found = top_keys(top)

    wide = found["wide"]["available"]
    named = [e for e in wide if not e.other]
    assert [e.key for e in named] == sorted(available, key=lambda k: -available[k])[:top]
    assert [e.jobs for e in named] == [counted("wide", "available")[e.key] for e in named]
    (other,) = [e for e in wide if e.other]
    assert (other.key, other.keys, other.jobs) == (
        "other",
        12 - top,
        sum(available.values()) - sum(e.jobs for e in named),
    )
    running = found["wide"]["running"]
    assert [(e.key, e.jobs) for e in running][: min(top, 2)] == [("k01", 2), ("k00", 1)][: min(top, 2)]
    assert [(e.key, e.jobs, e.other) for e in found["narrow"]["available"]] == [("only", 2, False)]
    assert found["narrow"]["running"] == []


# --- the admin page ------------------------------------------------------------------------


def test_keys_page__lists_the_keys_linked_from_the_queue_with_their_shares() -> None:
    queue = QueueFactory(name="tenants", max_workers=4)
    load("tenants", {"tenant:1": 3, "tenant:<b>": 1, "": 2}, running={"tenant:1": 1})
    now = timezone.now()
    WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="box", pid=7, started_at=now, last_seen_at=now, mode="hard_reserved",
        queues={"tenants": {"mode": "hard_reserved", "capacity": {"type": "HardReserved", "max_workers": 4},
                            "in_flight": 1, "available": 3, "paused": False, "jobs_available": 6}},
        flags={"listening": True, "leader": True, "stopping": False, "in_flight": 1, "sync_running": 0},
    )  # fmt: skip
    client = client_for(User.objects.create_superuser("root", password=None))

    change = client.get(f"/admin/awa/queue/{queue.pk}/change/").content.decode()
    assert "/admin/awa/queue/keys/tenants/" in change
    response = client.get("/admin/awa/queue/keys/tenants/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "3 key(s) with jobs: 6 available, 1 running" in page
    assert "4 slot(s)" in page and "held by 1 live worker(s)" in page
    assert "<code>tenant:&lt;b&gt;</code>" in page and "(default key)" in page
    shares = water_fill(4, {"tenant:1": 1, "tenant:<b>": 1, "": 1}, {"tenant:1": 4.0, "tenant:<b>": 1.0, "": 2.0})
    assert f"{shares['tenant:1']:.2f}" in page and f"{shares['tenant:<b>']:.2f}" in page
    assert "fair_key=tenant%3A1" in page  # each key links to its jobs


def test_keys_page__view_permission_needed_and_odd_names_answered() -> None:
    plain = client_for(User.objects.create_user("plain", password=None, is_staff=True))
    assert plain.get("/admin/awa/queue/keys/tenants/").status_code == 403
    root = client_for(User.objects.create_superuser("root", password=None))
    assert root.get("/admin/awa/queue/keys/a%00b/").status_code == 404
    assert root.get("/admin/awa/queue/keys/nobody/").status_code == 200  # a queue without jobs: empty lists


def test_keys_page__reads_a_bounded_number_of_queries(django_assert_max_num_queries: Any) -> None:
    QueueFactory(name="tenants")
    load("tenants", {f"t{n}": 1 + n % 3 for n in range(300)})
    client = client_for(User.objects.create_superuser("root", password=None))
    with django_assert_max_num_queries(12):
        assert client.get("/admin/awa/queue/keys/tenants/").status_code == 200


# --- awa_health and the depth view -----------------------------------------------------------


def health_json() -> dict[str, Any]:
    out = StringIO()
    try:
        call_command("awa_health", "--json", stdout=out, stderr=StringIO())
    except CommandError:
        pass  # no live worker: unhealthy, but the report is printed
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


@override_settings(AWA={"FAIR_KEYS_TOP": 2})
def test_awa_health_json__top_keys_per_queue_then_other() -> None:
    load("tenants", {"a": 5, "b": 4, "c": 1, "d": 1}, running={"a": 1})

    (queue,) = [q for q in health_json()["queues"] if q["name"] == "tenants"]

    assert queue["keys"]["available"] == [
        {"key": "a", "jobs": 5, "keys": 1, "other": False},
        {"key": "b", "jobs": 4, "keys": 1, "other": False},
        {"key": "other", "jobs": 2, "keys": 2, "other": True},
    ]
    assert queue["keys"]["running"] == [{"key": "a", "jobs": 1, "keys": 1, "other": False}]


@override_settings(AWA={"FAIR_KEYS_TOP": 3, "METRICS_OPEN": True})  # the view is staff-only by default
def test_depth_view__key_series_bounded_by_the_setting_and_summing_to_the_rows() -> None:
    load("tenants", {f"tenant:{n}": n + 1 for n in range(40)}, running={"tenant:0": 2, "other": 1})

    text = Client().get("/awa/metrics").content.decode()
    samples = [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "awa_queue_key_jobs"
    ]

    available = {labels["key"]: value for labels, value in samples if labels["state"] == "available"}
    assert list(available) == sorted(["tenant:39", "tenant:38", "tenant:37", "other"])
    assert available["other"] == sum(range(1, 38))
    running = {labels["key"]: value for labels, value in samples if labels["state"] == "running"}
    assert running == {"tenant:0": 2.0, "other": 1.0}  # a key named "other" shares the label of the rest
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa_job WHERE queue = 'tenants' AND state = 'available'")
        assert sum(available.values()) == cursor.fetchone()[0]
