"""Live views and worker control in a real headless Chromium (the harness of test_browser.py):
the queue list's and the dashboard's numbers follow the database with no reload, and a worker
asked from its page to stop claiming a queue acknowledges it."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from awa_django.models import Job, WorkerRequest
from tests.admin.test_browser import _log_in, browser, screenshot, unswapped, wait_for
from tests.factories import QueueFactory
from tests.harness import make_config, running_worker, wait_until

__all__ = ["browser"]  # the fixture, used by name

MARK = "return window.awaNotReloaded === true"


def _cell(driver: Any, css: str) -> str:
    text: str = unswapped(driver, lambda d: d.find_element(By.CSS_SELECTOR, css).text)
    return text


@pytest.mark.django_db(transaction=True)
def test_live_in_chromium__queue_list_and_dashboard_follow_the_database_without_a_reload(
    browser: Any, live_server: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")
    QueueFactory(name="emails", paused=True)  # paused: no worker takes them, the count is ours
    Job.objects.enqueue_many([{"kind": "render", "queue": "emails"} for _ in range(3)])
    driver = browser
    _log_in(driver, live_server, "/admin/awa/queue/")
    wait_for(driver, "#awa-queue-live #result_list")
    cell = "#result_list tr:has(th.field-name) td.field-available"
    assert _cell(driver, cell) == "3"
    driver.execute_script("window.awaNotReloaded = true")

    Job.objects.enqueue_many([{"kind": "render", "queue": "emails"} for _ in range(4)])

    WebDriverWait(driver, 30).until(lambda d: _cell(d, cell) == "7")  # re-read when the refresh swaps the cell
    assert driver.execute_script(MARK)  # the same page: refreshed in place
    assert str(Job.objects.filter(queue="emails", state="available").count()) == "7"
    assert "refresh failed" not in driver.find_element(By.ID, "awa-refresh-note").text
    assert screenshot(driver, "queue-list-live.png").stat().st_size > 5_000

    driver.get(f"{live_server.url}/admin/awa/queue/dashboard/")
    dashboard = 'tr[data-queue="emails"] td[data-count="available"]'
    assert _cell(driver, dashboard) == "7"
    driver.execute_script("window.awaNotReloaded = true")
    Job.objects.enqueue_many([{"kind": "render", "queue": "emails"} for _ in range(5)])
    WebDriverWait(driver, 30).until(lambda d: _cell(d, dashboard) == "12")
    assert driver.execute_script(MARK)


@pytest.mark.django_db(transaction=True)
def test_control_in_chromium__hold_a_queue_from_the_worker_s_page(
    browser: Any, live_server: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")
    QueueFactory(name="emails")
    QueueFactory(name="reports")
    with running_worker(make_config(["emails", "reports"])) as worker:
        from awa_django.models import WorkerInstance

        row = wait_until(WorkerInstance.objects.first, timeout=30, what="the worker's snapshot")
        driver = browser
        _log_in(driver, live_server, f"/admin/awa/workerinstance/{row.pk}/change/")
        wait_for(driver, "#awa-control")
        driver.find_element(By.CSS_SELECTOR, '#awa-control-queues tr[data-queue="reports"] button').click()
        assert "pending until the worker acknowledges it" in wait_for(driver, ".messagelist .success").text
        request = WorkerRequest.objects.get()
        assert (request.action, request.queue, request.requested_by) == ("hold", "reports", "admin")
        wait_until(
            lambda: WorkerRequest.objects.filter(pk=request.pk, acknowledged_at__isnull=False).exists(),
            timeout=30,
            what="the worker's acknowledgement",
        )
        wait_until(lambda: "reports" in worker.control.held, timeout=5, what="the hold in the worker")
        wait_until(
            lambda: WorkerInstance.objects.get(pk=row.pk).flags.get("held_queues") == ["reports"],
            timeout=30,
            what="the held flag in the snapshot",
        )
        driver.get(f"{live_server.url}/admin/awa/workerinstance/{row.pk}/change/")
        table = wait_for(driver, "#awa-worker-requests").text
        assert "holding queue 'reports'" in table and "pending" not in table
        assert wait_for(driver, '#awa-control-queues tr[data-queue="reports"] button').text == "Resume"
        assert screenshot(driver, "worker-control.png").stat().st_size > 5_000
