"""LISTEN/NOTIFY wake-ups: with a 60 s poll interval, a job enqueued into an idle worker still runs
at once, because the insert's NOTIFY wakes its queue's dispatcher."""

from __future__ import annotations

import signal

import pytest

from awa_django.models import Job, WorkerInstance
from awa_django.sql import JOBS_CHANNEL
from awa_django.worker.listener import Listener
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Spawner, wait_for_row

# Far below the 60 s poll interval: only a NOTIFY can get the job run this soon.
PROMPTLY = 10.0


@pytest.mark.django_db(transaction=True)
def test_wakeup__idle_worker_with_60s_poll_interval__runs_a_new_job_on_notify(monkeypatch: pytest.MonkeyPatch) -> None:
    notifications: list[tuple[str, str]] = []
    on_notify = Listener.on_notify

    def recording_on_notify(self: Listener, channel: str, payload: str) -> None:
        notifications.append((channel, payload))
        on_notify(self, channel, payload)

    monkeypatch.setattr(Listener, "on_notify", recording_on_notify)

    with running_worker(make_config(["wake"], poll_interval=60.0)) as worker:
        # Idle: LISTEN is up, the probe that follows it found nothing, and the dispatcher sleeps
        # until told (the next probe is 60 s away).
        dispatcher = worker.runners["wake"]
        wait_until(
            lambda: worker.listening and not worker.probe.now.is_set() and not dispatcher.hungry,
            what="an idle, listening dispatcher",
        )
        job = Job.objects.enqueue("noop", queue="wake")
        done = wait_for_row(job.pk, timeout=PROMPTLY, state="completed")

    assert done.attempt == 1
    assert (JOBS_CHANNEL, "wake") in notifications


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_wakeup__subprocess_worker_with_60s_poll_interval__runs_a_new_job_promptly(spawn: Spawner) -> None:
    worker = spawn("-q", "wake", "--poll-interval", "60", "--heartbeat-interval", "0.5", name="wake")

    def listening() -> bool:
        snapshot = WorkerInstance.objects.first()
        return snapshot is not None and snapshot.flags.get("listening") is True

    wait_until(listening, timeout=60, what="the worker's snapshot to say it is listening")
    job = Job.objects.enqueue("noop", queue="wake")
    done = wait_for_row(job.pk, timeout=PROMPTLY, state="completed")

    assert done.attempt == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-4000:]
