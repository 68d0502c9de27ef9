"""One name for the capacity mode, in all four pairs of mode and scope, wherever it is shown: the
worker's start line, its snapshot row, the dashboard (page and JSON), the queue list and
``awa_health``. Capacity reads as words ("cluster: cap 2 of 6"), never as a Python repr, and the
global maximum in force stands beside the configured one with the reason."""

from __future__ import annotations

import json
import logging
import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.urls import reverse

from awa_django.models import ClusterSettings, Queue, WorkerInstance
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until

QUEUE = "words"
REPR = re.compile(r"(HardReserved|Weighted)\(")


def _health() -> tuple[str, dict[str, Any]]:
    text, raw = StringIO(), StringIO()
    for args, out in (((), text), (("--json",), raw)):
        try:
            call_command("awa_health", *args, stdout=out, stderr=StringIO())
        except CommandError:
            pass  # an unhealthy verdict (a queue without a worker, say) is not what this test reads
    return text.getvalue(), json.loads(raw.getvalue())


def _row() -> WorkerInstance | None:
    row = WorkerInstance.objects.first()
    if row is None or QUEUE not in (row.queues or {}):
        return None
    return row


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("global_max", "scope", "mode", "label"),
    [
        (None, "process", "hard_reserved", "hard-reserved"),
        (8, "process", "weighted", "weighted"),
        (None, "cluster", "hard_reserved", "hard-reserved, cluster scope"),
        (8, "cluster", "weighted", "weighted, cluster scope"),
    ],
)
def test_mode_words__one_name_in_log_snapshot_admin_and_awa_health(
    global_max: int | None, scope: str, mode: str, label: str, caplog: pytest.LogCaptureFixture
) -> None:
    Queue.objects.create(name=QUEUE, max_workers=3, min_workers=1, weight=2)
    if scope == "cluster" and mode == "weighted":  # a row would make a hard-reserved cluster weighted
        ClusterSettings.objects.update_or_create(id=1, defaults={"global_max_workers": 6})
    config = make_config(
        {QUEUE: QueueConfig(QUEUE, max_workers=3, min_workers=1, weight=2)},
        global_max_workers=global_max,
        capacity_scope=scope,
    )
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    settings = {"GLOBAL_MAX_WORKERS": global_max, "CAPACITY_SCOPE": scope}
    with override_settings(AWA=settings), caplog.at_level(logging.INFO, logger="awa_django.worker"):
        with running_worker(config):
            if scope == "cluster":  # the leader (this worker) has given it a cap
                wait_until(
                    lambda: (r := _row()) is not None and r.queues[QUEUE]["capacity"]["max_workers"] > 0,
                    what="a cluster cap in the snapshot",
                )
            row = wait_until(_row, what="the worker's snapshot row")
            page = client.get(reverse("admin:awa_dashboard")).content.decode()
            data = client.get(reverse("admin:awa_dashboard_data")).json()
            queues = client.get(reverse("admin:awa_queue_changelist")).content.decode()
            text, report = _health()

    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("worker started")]
    assert len(started) == 1 and f" mode={mode} capacity_scope={scope} " in started[0], started

    assert row.mode == mode
    assert row.queues[QUEUE]["mode"] == mode
    assert row.flags["capacity_scope"] == scope

    [shown] = data["workers"]
    assert (shown["mode"], shown["capacity_scope"], shown["mode_label"]) == (mode, scope, label)
    assert f"<td>{label}</td>" in page
    assert f'class="field-mode">{label}<' in queues

    [health] = report["workers"]
    assert (health["mode"], health["capacity_scope"]) == (mode, scope)
    assert f" mode={mode} capacity_scope={scope}" in text

    capacity = shown["queues"][QUEUE]
    if scope == "cluster":
        limit = 6 if mode == "weighted" else 3  # the global maximum in force; the queue's max_workers
        cap = row.queues[QUEUE]["capacity"]["max_workers"]
        assert capacity["describe"] == f"cluster: cap {cap} of {limit}"
    elif mode == "weighted":
        assert capacity["describe"] == f"weighted: min 1, weight 2, overflow held {capacity['overflow_held']}"
    else:
        assert capacity["describe"] == "hard-reserved: max 3"
    assert capacity["describe"] in page
    for html in (page, queues, json.dumps(data)):
        assert REPR.search(html) is None
        if mode == "weighted":
            assert "hard_reserved" not in html and "hard-reserved" not in html

    in_force = data["global_max_workers"]
    if scope == "cluster" and mode == "weighted":
        # Configured 8 (and the worker's own 8), the Cluster settings row 6: 6 is in force.
        assert in_force["configured"] == 8 and in_force["in_force"] == [6]
        assert "the smallest of the Cluster settings row (6)" in in_force["reason"]
        assert "in force: global max 6" in page
        assert "global maximum in force 6, configured 8" in text
    else:
        assert in_force["reason"] == ""
        assert "in force:" not in page
