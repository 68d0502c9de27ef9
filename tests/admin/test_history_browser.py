"""The history page in a real headless Chromium (the harness of ``test_browser``): reached from
the dashboard's link, its totals per queue are the database's, a queue's charts are drawn, and
the screenshot is written."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Count, Q

from awa_django.models import Job
from tests.admin.test_browser import _log_in, browser, finished_jobs_over_the_last_hour, screenshot, wait_for
from tests.admin.test_history import roll_up

__all__ = ["browser"]  # the fixture, used by name

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait


@pytest.mark.django_db(transaction=True)
def test_history_in_chromium__from_the_dashboard_totals_match_the_database_and_charts_drawn(
    browser: Any, live_server: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")
    finished_jobs_over_the_last_hour()
    roll_up()
    driver = browser
    _log_in(driver, live_server, "/admin/awa/queue/dashboard/")
    wait_for(driver, "#awa-history-link").click()

    table = wait_for(driver, "#awa-history-totals")
    shown = {
        row.get_attribute("data-name"): (
            int(row.get_attribute("data-completed")),
            int(row.get_attribute("data-failed")),
        )
        for row in table.find_elements(By.CSS_SELECTOR, "tr[data-name]")
    }
    expected = {
        row["queue"]: (row["completed"], row["failed"])
        for row in Job.objects.filter(state__in=["completed", "failed"])
        .values("queue")
        .annotate(completed=Count("pk", filter=Q(state="completed")), failed=Count("pk", filter=Q(state="failed")))
    }
    assert shown == expected and sum(c + f for c, f in shown.values()) == 900

    # The busiest queue is chosen, a tie going to the first name (the page's order): its bars and
    # lines are on the page. (The two queues tie at 450 each; max() over the database's unordered
    # rows took whichever came first.)
    busiest = min(expected, key=lambda q: (-sum(expected[q]), q))
    assert driver.find_element(By.ID, "awa-history-name").text == f"Queue {busiest}"
    wait_for(driver, "#awa-history-throughput rect.awa-bar")  # waited for, not read once
    label = driver.find_element(By.CSS_SELECTOR, "#awa-history-throughput svg").get_attribute("aria-label")
    assert f"{expected[busiest][0]} completed, {expected[busiest][1]} failed" in label
    assert driver.find_elements(By.CSS_SELECTOR, "#awa-history-failure-rate polyline.awa-line-rate")

    # Per kind, then a screenshot.
    old_table = driver.find_element(By.ID, "awa-history-totals")
    driver.find_element(By.LINK_TEXT, "per kind").click()
    WebDriverWait(driver, 15).until(expected_conditions.staleness_of(old_table))  # the new page, not the old one
    kinds = wait_for(driver, "#awa-history-totals").find_elements(By.CSS_SELECTOR, "tr[data-name]")
    assert [k.get_attribute("data-name") for k in kinds] == ["render"]
    assert screenshot(driver, "history.png").stat().st_size > 5_000
