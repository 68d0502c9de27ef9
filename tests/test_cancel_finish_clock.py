"""A job cancelled from the app (``services.jobs.cancel_jobs``, the admin's cancel action) is
stamped with the database's clock, as every other finalising write is: the history rollup closes
minutes by the database's clock (``HISTORY_GRACE`` after they end), so a finish time read from the
web server's clock, behind the database's by more than the grace, lands in a minute already final
and the cancelled job is never counted, while the rows say it was cancelled."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest
from django.db.models import Sum

from awa_django.models import HistoryMinute, Job, JobState
from awa_django.services import jobs as job_services
from awa_django.worker.history import RollupBounds, roll_up_history
from tests.conftest import connection_params
from tests.harness import database_now


def _round() -> RollupBounds:
    async def one() -> RollupBounds:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            return await roll_up_history(conn)  # the database's clock

    return asyncio.run(one())


def _caught_up() -> None:
    while _round().catching_up:
        pass


@pytest.mark.django_db(transaction=True)
def test_cancel__app_clock_behind_the_database__the_cancelled_job_is_counted_in_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = Job.objects.enqueue("cancel_clock", {}, queue="cancel_clock").id
    _caught_up()  # every minute ended more than the grace ago is final
    behind = database_now() - timedelta(minutes=3)  # a web server whose clock runs 3 minutes slow
    monkeypatch.setattr("django.utils.timezone.now", lambda: behind)
    assert job_services.cancel_jobs([job_id]) == 1
    _caught_up()
    rows = Job.objects.filter(state=JobState.CANCELLED, kind="cancel_clock").count()
    counted = HistoryMinute.objects.filter(dimension="kind", name="cancel_clock").aggregate(n=Sum("cancelled"))["n"]
    assert rows == 1
    assert counted == rows, "the cancelled job is in the rows but never in the history"
