"""LISTEN/NOTIFY wake-ups: with a 60 s poll interval, a job enqueued into an idle worker still runs
at once, because the insert's NOTIFY wakes its queue's dispatcher."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from awa_django.models import Job, WorkerInstance
from awa_django.sql import JOBS_CHANNEL
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.runtime import Worker
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Spawner, wait_for_row

# Far below the 60 s poll interval: only a NOTIFY can get the job run this soon.
PROMPTLY = 10.0


@pytest.mark.django_db(transaction=True)
def test_wakeup__idle_worker_with_60s_poll_interval__runs_a_new_job_on_notify(monkeypatch: pytest.MonkeyPatch) -> None:
    notifications: list[tuple[str, str]] = []
    idle_polls: list[str] = []
    on_notify = Worker._on_notify
    poll_once = Dispatcher.poll_once

    def recording_on_notify(self: Worker, channel: str, payload: str) -> None:
        notifications.append((channel, payload))
        on_notify(self, channel, payload)

    async def recording_poll_once(self: Dispatcher) -> Any:
        # A poll that starts once LISTEN is up comes after the reconnect's wake-up was consumed:
        # when it has found nothing, the dispatcher waits for a NOTIFY (or 60 s).
        after_listen = self.worker.listening
        result = await poll_once(self)
        if after_listen:
            idle_polls.append(self.queue)
        return result

    monkeypatch.setattr(Worker, "_on_notify", recording_on_notify)
    monkeypatch.setattr(Dispatcher, "poll_once", recording_poll_once)

    with running_worker(make_config(["wake"], poll_interval=60.0)) as worker:
        wait_until(lambda: worker.listening and "wake" in idle_polls, what="an idle, listening dispatcher")
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
