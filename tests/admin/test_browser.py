"""The admin in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, see
.ci/browser-deps), driven by Selenium against ``live_server``, with a real worker running.

Screenshots land in ``test-output/`` (git-ignored) for review.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from awa_django import JobContext
from awa_django.models import Job, Queue
from awa_django.registry import JobHandler, Registry
from awa_django.worker import QueueConfig
from tests.factories import QueueFactory
from tests.harness import ROOT, make_config, running_worker, wait_until
from tests.skiprule import missing_dependency

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
OUTPUT = ROOT / "test-output"

if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        missing_dependency("Debian's chromium and chromium-driver", "run .ci/browser-deps"), allow_module_level=True
    )
webdriver = pytest.importorskip(
    "selenium.webdriver", reason=missing_dependency("the selenium package", 'pip install -e ".[dev]"')
)
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--metrics-recording-only", "--no-default-browser-check", "--window-size=1440,1000",
)  # fmt: skip


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    """A full-page PNG: the viewport is stretched to the document's height first."""
    OUTPUT.mkdir(exist_ok=True)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    metrics = {"width": 1440, "height": max(height, 600), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    path = OUTPUT / name
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path


def unswapped(driver: Any, read: Any, timeout: float = 15) -> Any:
    """``read(driver)``, retried while the live refresh replaces the element it reads (stale)."""
    result: list[Any] = []

    def attempt(d: Any) -> bool:
        result[:] = [read(d)]
        return True

    WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(attempt)
    return result[0]


def wait_for(driver: Any, css: str, timeout: float = 15) -> Any:
    return WebDriverWait(driver, timeout).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def finished_jobs_over_the_last_hour() -> None:
    now = timezone.now()
    Job.objects.enqueue_many({"kind": "render", "queue": ("emails", "reports")[i % 2]} for i in range(900))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE awa_job
            SET state = CASE WHEN id %% 13 = 0 THEN 'failed' ELSE 'completed' END,
                attempt = 1,
                finalized_at = %(now)s - ((id * 7919) %% 3540) * interval '1 second'
            """,
            {"now": now},
        )
    Job.objects.enqueue_many({"kind": "render", "queue": "reports"} for _ in range(40))
    old = Job.objects.enqueue("render", queue="emails", run_at=now - timedelta(minutes=3))
    Job.objects.filter(pk=old.pk).update(state="scheduled", run_at=now + timedelta(minutes=30))


def parked_durable_job() -> Job:
    """A durable job run in-process to its wait (on a queue no worker of these tests serves)."""
    from tests.durable.support import registry_of, run_once

    def handler(context: JobContext) -> Any:
        context.step("charge", lambda: {"charge_id": "ch_1"})
        return context.wait_for("approved")

    job = Job.objects.enqueue("browser.durable", {}, queue="durable-browser")
    run = run_once(job.pk, registry_of("browser.durable", handler, queue="durable-browser"))
    assert run is not None and run.state == "waiting", run
    return job


@pytest.mark.django_db(transaction=True)
def test_admin_in_chromium__edit_a_queue_see_a_rule_error_and_the_dashboard(
    browser: Any, live_server: Any, django_user_model: Any, settings: Any
) -> None:
    settings.AWA = {"GLOBAL_MAX_WORKERS": 20}
    django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")
    emails = QueueFactory(name="emails", min_workers=2, weight=1)
    QueueFactory(name="reports", min_workers=2, weight=1, paused=True)
    finished_jobs_over_the_last_hour()

    release = threading.Event()

    def hold(context: JobContext) -> None:
        while not (release.is_set() or context.cancelled):
            time.sleep(0.02)

    registry = Registry()
    registry.register(JobHandler("hold", hold, queue="emails", takes_context=True))
    config = make_config(
        {"emails": QueueConfig("emails", min_workers=2, weight=1), "reports": QueueConfig("reports", min_workers=2)},
        global_max_workers=20,
    )
    for _ in range(6):
        Job.objects.enqueue("hold", queue="emails")

    with running_worker(config, registry=registry) as worker:
        try:
            wait_until(lambda: len(worker.in_flight) == 6, timeout=15, what="six jobs in flight")
            driver = browser
            # Log in.
            driver.get(f"{live_server.url}/admin/login/?next=/admin/awa/queue/")
            driver.find_element(By.NAME, "username").send_keys("admin")
            driver.find_element(By.NAME, "password").send_keys("s3cret-pass")
            driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
            wait_for(driver, "#result_list")
            screenshot(driver, "queue-changelist.png")

            # Change a queue's weight: saved, and the worker applies it.
            driver.get(f"{live_server.url}/admin/awa/queue/{emails.pk}/change/")
            weight = wait_for(driver, "input[name=weight]")
            weight.clear()
            weight.send_keys("5")
            driver.find_element(By.NAME, "_save").click()
            assert "was changed successfully" in wait_for(driver, ".messagelist .success").text
            assert Queue.objects.get(pk=emails.pk).weight == 5
            wait_until(lambda: worker.config.queues["emails"].weight == 5, timeout=10, what="the worker to apply it")

            # An invalid min_workers: the form names the numbers and nothing is saved.
            driver.get(f"{live_server.url}/admin/awa/queue/{emails.pk}/change/")
            min_workers = wait_for(driver, "input[name=min_workers]")
            min_workers.clear()
            min_workers.send_keys("25")
            driver.find_element(By.NAME, "_save").click()
            error = wait_for(driver, ".field-min_workers .errorlist").text
            assert "sum of min_workers (27) exceeds global_max_workers (20)" in error
            assert "may have at most 18" in error
            screenshot(driver, "queue-error.png")
            assert Queue.objects.get(pk=emails.pk).min_workers == 2

            # The dashboard: the chart, the queues, the live worker; and it refreshes itself.
            driver.get(f"{live_server.url}/admin/awa/queue/dashboard/")
            wait_for(driver, "svg.awa-chart rect.awa-bar-completed")
            # The page refreshes itself every few seconds, replacing the nodes a read may be holding:
            # each read is retried when the refresh swapped its element away mid-read.
            # Waited for, not read once: a read in the middle of a refresh's swap finds no chart at all.
            wait_for(driver, "svg.awa-chart rect.awa-bar-failed")
            body = unswapped(driver, lambda d: d.find_element(By.ID, "awa-dashboard").text)
            assert "emails: weighted: min 2, weight 5, overflow held " in body  # held varies while it polls
            assert f"{worker.hostname}:{worker.pid}" in body
            stamp = unswapped(
                driver, lambda d: d.find_element(By.CSS_SELECTOR, ".awa-stat:last-child .awa-stat-value").text
            )
            # Retried when the refresh swaps the element between its find and its read.
            WebDriverWait(driver, 15, ignored_exceptions=(StaleElementReferenceException,)).until(
                lambda d: d.find_element(By.CSS_SELECTOR, ".awa-stat:last-child .awa-stat-value").text != stamp
            )
            assert "refresh failed" not in driver.find_element(By.ID, "awa-refresh-note").text
            path = screenshot(driver, "dashboard.png")
            assert path.stat().st_size > 10_000

            # A failed job's detail page: the error history with its traceback.
            failed = Job.objects.filter(state="failed").order_by("-id").first()
            assert failed is not None
            Job.objects.filter(pk=failed.pk).update(
                args={"user_id": 7, "template": "welcome"},
                errors=[{"error": "ValueError: no template 'welcome'", "attempt": 1, "at": timezone.now().isoformat(),
                         "traceback": 'Traceback (most recent call last):\n  File "jobs.py", line 3, in render\n'
                                      "ValueError: no template 'welcome'\n"}],
            )  # fmt: skip
            driver.get(f"{live_server.url}/admin/awa/job/?state__exact=failed")
            wait_for(driver, "#result_list")
            screenshot(driver, "job-changelist.png")
            driver.get(f"{live_server.url}/admin/awa/job/{failed.pk}/change/")
            assert "ValueError: no template" in wait_for(driver, "pre.awa-traceback").text
            assert driver.find_element(By.CSS_SELECTOR, "button.awa-tool-button").text.lower() == "retry now"
            screenshot(driver, "job-detail.png")

            # A durable job parked in its wait: its steps as a timeline, what holds it, the restart.
            parked = parked_durable_job()
            driver.get(f"{live_server.url}/admin/awa/job/{parked.pk}/change/")
            steps = [row.get_attribute("data-step") for row in driver.find_elements(By.CSS_SELECTOR, "tr.awa-step")]
            assert steps == ["charge", "wait:approved#1"]
            assert "waiting in 'wait:approved#1' for event 'approved'" in wait_for(driver, ".awa-in-force").text
            options = driver.find_elements(By.CSS_SELECTOR, ".awa-restart-form select[name=step] option")
            assert [option.text for option in options] == steps
            screenshot(driver, "job-steps.png")
        finally:
            release.set()


def _data_jobs(driver: Any) -> list[int]:
    return [int(r.get_attribute("data-job")) for r in driver.find_elements(By.CSS_SELECTOR, "tr[data-job]")]


def _log_in(driver: Any, live_server: Any, next_url: str) -> None:
    driver.get(f"{live_server.url}/admin/login/?next={next_url}")
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys("s3cret-pass")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()


@pytest.mark.django_db(transaction=True)
def test_console_in_chromium__running_now_search_failures_and_bulk_retry(
    browser: Any, live_server: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")
    now = timezone.now()
    Job.objects.bulk_create(
        Job(kind="render", queue="reports", state="failed", attempt=1, max_attempts=1, args={"user_id": n % 3},
            finalized_at=now - timedelta(minutes=n),
            errors=[{"error": f"KeyError: 'template {n}'", "attempt": 1, "at": now.isoformat()}])
        for n in range(30)
    )  # fmt: skip
    release = threading.Event()

    def hold(context: JobContext) -> None:
        context.set_progress({"done": context.job_id % 10})
        while not (release.is_set() or context.cancelled):
            time.sleep(0.02)

    registry = Registry()
    registry.register(JobHandler("hold", hold, queue="emails", takes_context=True))
    for _ in range(3):
        Job.objects.enqueue("hold", queue="emails")
    with running_worker(make_config(["emails"]), registry=registry) as worker:
        try:
            wait_until(lambda: len(worker.in_flight) == 3, timeout=15, what="three jobs in flight")
            driver = browser
            name = f"{worker.hostname}:{worker.pid}"
            _log_in(driver, live_server, "/admin/awa/job/running/")

            # Running now: the rows are the running jobs, and the page refreshes itself.
            wait_for(driver, "#awa-running")
            running = set(Job.objects.filter(state="running").values_list("pk", flat=True))
            shown = unswapped(
                driver,
                lambda d: {int(r.get_attribute("data-job")) for r in d.find_elements(By.CSS_SELECTOR, "tr[data-job]")},
            )
            assert shown == running and len(running) == 3
            assert name in unswapped(driver, lambda d: d.find_element(By.ID, "awa-running").text)
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "awa-live").get_attribute("data-refreshed"))
            assert "refresh failed" not in driver.find_element(By.ID, "awa-refresh-note").text
            assert screenshot(driver, "running-now.png").stat().st_size > 5_000

            # Search by an args path.
            driver.get(f"{live_server.url}/admin/awa/job/")
            box = wait_for(driver, "#searchbar")
            box.send_keys("user_id=2")
            box.submit()
            wait_for(driver, "#result_list")
            ids = {int(a.text) for a in driver.find_elements(By.CSS_SELECTOR, "#result_list th.field-id a")}
            assert ids == set(Job.objects.filter(args__contains={"user_id": 2}).values_list("pk", flat=True))
            assert len(ids) == 10
            screenshot(driver, "job-search.png")

            # Failures: one group of 30, its numbers those of the database.
            driver.get(f"{live_server.url}/admin/awa/job/failures/")
            [group] = wait_for(driver, "#awa-failures").find_elements(By.CSS_SELECTOR, "tr[data-group]")
            assert group.get_attribute("data-count") == str(Job.objects.filter(state="failed").count()) == "30"
            assert "KeyError" in group.text and "'…'" in group.text
            screenshot(driver, "failures.png")

            # Bulk retry over the filter: preview, confirm, run to the end.
            driver.get(f"{live_server.url}/admin/awa/job/?state__exact=failed&queue=reports")
            wait_for(driver, "#awa-bulk-retry").click()
            count = wait_for(driver, "#awa-bulk-count").text
            assert count.startswith("30 jobs match")
            sample = _data_jobs(driver)
            failed_ids = list(Job.objects.filter(state="failed").order_by("pk").values_list("pk", flat=True))
            assert sample == failed_ids[:10]
            screenshot(driver, "bulk-preview.png")
            driver.find_element(By.ID, "awa-bulk-confirm").click()
            WebDriverWait(driver, 30).until(
                lambda d: d.find_element(By.ID, "awa-bulk-progress").get_attribute("data-state") == "finished"
            )
            assert driver.find_element(By.ID, "awa-bulk-progress").get_attribute("data-done") == "30"
            assert Job.objects.filter(pk__in=failed_ids, state="failed").count() == 0
            screenshot(driver, "bulk-done.png")
        finally:
            release.set()
