"""``manage.py awa_health``: exit status 0 only with a live, healthy worker and no queue waiting too long."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from awa_django.models import Job, WorkerInstance
from tests.factories import QueueFactory
from tests.harness import make_config, running_worker, wait_until


def health(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("awa_health", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return 0, out.getvalue(), ""


def worker_row(seen_ago: timedelta = timedelta(0), **flags: Any) -> WorkerInstance:
    now = timezone.now()
    return WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="box", pid=7, started_at=now - timedelta(hours=1),
        last_seen_at=now - seen_ago, mode="hard_reserved",
        queues={"default": {"mode": "hard_reserved", "capacity": {"type": "HardReserved", "max_workers": 50},
                            "in_flight": 0, "available": 50, "paused": False, "jobs_available": 0}},
        flags={"listening": True, "leader": True, "stopping": False, "in_flight": 0, "sync_running": 0} | flags,
    )  # fmt: skip


@pytest.mark.django_db
def test_awa_health__no_worker_is_unhealthy() -> None:
    code, out, err = health()
    assert code == 1
    assert "no live worker" in err
    assert "UNHEALTHY" in out


@pytest.mark.django_db
def test_awa_health__a_fresh_worker_is_healthy() -> None:
    worker_row()
    code, out, _ = health()
    assert code == 0
    assert "healthy" in out
    assert "box:7 ok mode=hard_reserved" in out


@pytest.mark.django_db
def test_awa_health__a_stale_worker_is_not_live() -> None:
    worker_row(seen_ago=timedelta(minutes=2))
    code, _, err = health()
    assert code == 1
    assert "no live worker (none wrote a snapshot in the last 15s)" in err
    assert health("--stale-after", "600")[0] == 0  # the window is the caller's to choose


@pytest.mark.django_db
def test_awa_health__a_stopping_worker_is_not_healthy() -> None:
    worker_row(stopping=True)
    code, _, err = health()
    assert code == 1
    assert "are stopping" in err


@pytest.mark.django_db
def test_awa_health__an_old_available_job_is_unhealthy_unless_its_queue_is_paused() -> None:
    worker_row()
    job = Job.objects.enqueue("x", queue="default")
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - timedelta(seconds=400))

    code, out, err = health("--json")
    assert code == 1
    assert "queue 'default': the oldest available job has waited 6m 40s" in err
    report = json.loads(out)
    assert report["healthy"] is False
    default = next(q for q in report["queues"] if q["name"] == "default")
    assert default["healthy"] is False
    assert default["counts"]["available"] == 1
    assert 399 < default["oldest_available_age_seconds"] < 430

    assert health("--max-age", "1000")[0] == 0
    QueueFactory(name="default", paused=True)
    assert health()[0] == 0


@pytest.mark.django_db
def test_awa_health__json_report_lists_the_workers() -> None:
    worker_row()
    code, out, _ = health("--json")
    report = json.loads(out)
    assert code == 0
    assert report["healthy"] is True
    assert [w["worker"] for w in report["workers"]] == ["box:7"]
    assert report["workers"][0]["flags"]["leader"] is True


def test_awa_health__rejects_a_non_positive_max_age() -> None:
    with pytest.raises(CommandError, match="must be above 0"):
        call_command("awa_health", "--max-age", "0")


@pytest.mark.parametrize("argv", [[], ["--stale-after", "30"], ["--json"]])
def test_awa_health__a_bad_awa_setting__command_error_naming_it_not_a_traceback(argv: list[str]) -> None:
    """The probe skips the system checks (to be quick), so it must say a bad setting itself: before,
    building its parser read the settings (the --stale-after default) and the InvalidSettingsError
    escaped as a traceback, an exit status 1 that reads as "unhealthy" to the orchestrator."""
    from django.test import override_settings

    with override_settings(AWA={"HEARTBEAT_INTERVAL": "5"}), pytest.raises(CommandError) as raised:
        call_command("awa_health", *argv, stdout=StringIO(), stderr=StringIO())
    assert "AWA['HEARTBEAT_INTERVAL'] is '5'" in str(raised.value)
    assert "[awa.E003]" in str(raised.value)
    assert raised.value.returncode == 2  # as when it cannot read the job tables: it could not check


@pytest.mark.django_db(transaction=True)
def test_awa_health__a_real_running_worker_is_healthy_and_gone_after_it_stops() -> None:
    with running_worker(make_config(["default"])):
        wait_until(lambda: WorkerInstance.objects.exists(), timeout=10, what="the worker's first snapshot")
        code, out, _ = health()
        assert code == 0, out
        assert "mode=hard_reserved" in out
    assert health()[0] == 1  # a stopped worker removes its snapshot


@pytest.mark.django_db
def test_awa_health__says_when_cluster_workers_disagree_on_the_global_maximum() -> None:
    from awa_django.models import ClusterSettings, WorkerCapacity

    worker_row()
    ClusterSettings.objects.create(global_max_workers=12)
    for own in (12, 8):
        WorkerCapacity.objects.create(instance_id=uuid.uuid4(), global_max_workers=own, reported_at=timezone.now())
    code, out, _ = health()
    assert code == 0  # a disagreement is said, not a failure: the smallest value applies
    assert "cluster scope: 2 worker(s), global maximum in force 8 (Cluster settings: 12)" in out
    assert "workers disagree: their own settings are [8, 12]" in out


@pytest.mark.django_db
def test_awa_health__available_jobs_in_a_queue_no_live_worker_serves__unhealthy_naming_it() -> None:
    worker_row()  # serves "default" only
    Job.objects.enqueue("x", queue="emails")
    Job.objects.enqueue("x", queue="default")

    code, out, err = health()
    assert code == 1
    assert err == (
        "unhealthy: queue 'emails': 1 available job(s) and no live worker serves it; "
        "start one with `python manage.py awa_worker -q emails`, or pause the queue"
    )
    assert "emails NO WORKER" in out
    assert "default ok" in out

    report = json.loads(health("--json")[1])
    by_name = {q["name"]: q for q in report["queues"]}
    emails = by_name["emails"]
    assert (emails["no_worker"], emails["workers"], emails["healthy"]) == (True, 0, False)
    assert (by_name["default"]["no_worker"], by_name["default"]["workers"]) == (False, 1)

    QueueFactory(name="emails", paused=True)  # paused: waiting is intended
    code, out, _ = health()
    assert code == 0
    assert "emails paused no worker" in out


@pytest.mark.django_db
def test_awa_health__reason_printed_once() -> None:
    code, out, err = health()
    assert code == 1
    assert "no live worker" in err
    assert "no live worker (none" not in out  # stdout is the report; the reason is on stderr only


@pytest.mark.django_db
def test_awa_health__counts_stop_at_the_bound_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Failed jobs are kept for days: an exact count of them grows with the history, so the probe
    # counts each (queue, state) as the console does, up to the bound (lowered here to 3).
    from awa_django.management.commands import awa_health

    monkeypatch.setattr(awa_health, "COUNT_LIMIT", 3)
    worker_row()
    now = timezone.now()
    Job.objects.bulk_create(Job(kind="x", queue="default", state="failed", finalized_at=now) for _ in range(5))
    Job.objects.bulk_create(Job(kind="x", queue="default", state="available") for _ in range(2))
    out = health("--json")[1]
    default = next(q for q in json.loads(out)["queues"] if q["name"] == "default")
    assert (default["counts"]["failed"], default["counts"]["available"]) == (3, 2)
    assert default["counts_capped"] == ["failed"] and default["count_limit"] == 3
    text = health()[1]
    assert "available=2 " in text and "failed=3+" in text


@pytest.mark.django_db
@pytest.mark.parametrize("flags", [[], "leader", 5], ids=["list", "text", "number"])
def test_awa_health__a_snapshot_whose_flags_are_not_an_object_is_reported_not_a_traceback(flags: Any) -> None:
    """The pages read such flags as none (services.cluster.worker_healthy, the dashboard); the text
    report read ``w["flags"].get(…)`` and the probe died with AttributeError instead of reporting."""
    row = worker_row()
    WorkerInstance.objects.filter(pk=row.pk).update(flags=flags)

    code, out, _ = health()
    assert code == 0, out
    assert "box:7 ok mode=hard_reserved" in out and "in_flight=0 flags=-" in out

    code, out, _ = health("--json")
    assert code == 0
    assert json.loads(out)["workers"][0]["flags"] == {}
