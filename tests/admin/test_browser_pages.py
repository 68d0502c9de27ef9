"""Every custom page of the admin in a real headless Chromium (the harness of test_browser.py), on
the Django this suite runs on: run it on 5.2 and on 6.1. The pages are found from the admins'
get_urls (each URL an admin adds to Django's own), so a new page is checked without a word here.

On each page, read from the rendered DOM: the breadcrumbs are styled as a stock admin page on the
same browser styles its own (Django 6.1 styles only ``ol.breadcrumbs``, 5.2 only
``div.breadcrumbs``), and every button has the admin's button styling. The worker's page puts
its Control panel above the page's Close.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import django
import pytest
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, reverse
from django.utils import timezone
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.support.wait import WebDriverWait

from awa_django.admin.bulk import ACTIONS as BULK_ACTIONS
from awa_django.models import Job, WorkerInstance
from tests.admin.test_browser import _log_in, browser, screenshot, wait_for
from tests.factories import QueueFactory
from tests.harness import make_config, running_worker, wait_until

__all__ = ["browser"]  # the fixture, used by name

DJANGO = f"dj{django.VERSION[0]}{django.VERSION[1]}"
# The custom pages as they are today: the enumeration below must find at least these.
KNOWN_PAGES = {
    "awa_dashboard", "awa_job_failures", "awa_job_history", "awa_job_running", "awa_job_bulk", "awa_queue_keys",
}  # fmt: skip

# The computed style of the breadcrumbs: the bar, its first and last items, the Home link, and
# what separates the items (the text between links on 5.2, an ::after on each item on 6.1).
CRUMBS = """
const box = document.querySelector('nav[aria-label] > .breadcrumbs');
if (!box) return null;
const style = (el, pseudo) => {
  if (!el) return null;
  const s = getComputedStyle(el, pseudo || null);
  return {tag: el.tagName, background: s.backgroundColor, color: s.color, padding: s.padding, margin: s.margin,
          font: s.fontSize + ' ' + s.fontWeight, display: s.display, decoration: s.textDecorationLine,
          content: s.content};
};
return {bar: style(box), first: style(box.firstElementChild), last: style(box.lastElementChild),
        home: style(box.querySelector('a')), separator: style(box.firstElementChild, '::after'),
        text: box.innerText};
"""

# Every visible button of the page's content, and the admin's palette of button colours.
BUTTONS = """
const probe = document.createElement('span');
document.body.append(probe);
const colour = (name) => { probe.style.color = `var(${name})`; return getComputedStyle(probe).color; };
const palette = {fg: colour('--button-fg'), backgrounds: ['--button-bg', '--default-button-bg',
                 '--delete-button-bg'].map(colour)};
probe.remove();
const buttons = [...document.querySelectorAll('#content-main button, #content-main input[type=submit]')]
  .filter((b) => b.offsetParent !== null)
  .map((b) => { const s = getComputedStyle(b);
    return {label: (b.textContent || b.value).trim(), background: s.backgroundColor, color: s.color,
            radius: s.borderTopLeftRadius, border: s.borderTopStyle, cursor: s.cursor}; });
return {palette, buttons};
"""


def custom_urls() -> Iterator[tuple[admin.ModelAdmin[Any], URLPattern]]:
    """(admin, pattern) for each URL an awa admin adds to the ones Django's ModelAdmin has."""
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "awa":
            continue
        stock = {str(p.pattern) for p in admin.ModelAdmin.get_urls(model_admin)}
        for pattern in model_admin.get_urls():
            if isinstance(pattern, URLPattern) and str(pattern.pattern) not in stock:
                yield model_admin, pattern


def url_of(model_admin: admin.ModelAdmin[Any], pattern: URLPattern) -> str:
    kwargs: dict[str, str] = {}
    for parameter in pattern.pattern.converters:
        if parameter == "object_id":
            row = model_admin.model._default_manager.order_by("pk").first()
            kwargs[parameter] = str(row.pk if row is not None else 1)
        elif parameter == "name":  # a queue's
            kwargs[parameter] = "emails"
        elif parameter == "action":  # a bulk action; the act URLs take POSTs only
            kwargs[parameter] = next(iter(BULK_ACTIONS))
        else:
            pytest.fail(f"{pattern.pattern} takes {parameter}: give this test a value for it")
    assert pattern.name, f"{pattern.pattern} has no name"
    return reverse(f"admin:{pattern.name}", kwargs=kwargs)


def pages(client: Client) -> dict[str, str]:
    """name -> URL of each custom URL that answers a GET with an HTML page (the others take POSTs
    only, or are the JSON a live page refreshes itself from)."""
    found: dict[str, str] = {}
    for model_admin, pattern in custom_urls():
        url = url_of(model_admin, pattern)
        if url.endswith("/bulk/retry/"):
            url += "?state__exact=failed"
        response = client.get(url)
        kind = response.get("Content-Type", "")
        if response.status_code == 405 or kind.startswith("application/json"):
            continue
        assert response.status_code == 200 and kind.startswith("text/html"), (url, response.status_code, kind)
        found[str(pattern.name)] = url
    return found


def read(driver: Any, script: str, settled: Any, timeout: float = 15) -> Any:
    """The script's answer, once ``settled(answer)`` holds (or the last answer, for the assertion
    to show): the stylesheets may still be applying when the page's load event has fired."""
    answers: list[Any] = [None]

    def done(d: Any) -> bool:
        answers[0] = d.execute_script(script)
        return bool(settled(answers[0]))

    try:
        WebDriverWait(driver, timeout).until(done)
    except TimeoutException:
        pass
    return answers[0]


def styled_like(stock: dict[str, Any]) -> Any:
    return lambda crumbs: crumbs is not None and {k: v for k, v in crumbs.items() if k != "text"} == stock


def admin_buttons(reference: dict[str, str]) -> Any:
    def check(found: dict[str, Any]) -> bool:
        palette = found["palette"]
        return all(
            b["background"] in palette["backgrounds"]
            and {k: b[k] for k in ("color", "radius", "border", "cursor")} == reference
            for b in found["buttons"]
        )

    return check


@pytest.mark.django_db(transaction=True)
def test_every_custom_page_in_chromium__breadcrumbs_and_buttons_styled_as_the_admin_s(
    browser: Any, live_server: Any, django_user_model: Any
) -> None:
    user = django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")
    queue = QueueFactory(name="emails")
    now = timezone.now()
    Job.objects.bulk_create(
        Job(kind="render", queue="reports", state="failed", attempt=1, max_attempts=1,
            finalized_at=now - timedelta(minutes=n),
            errors=[{"error": f"KeyError: 'template {n}'", "attempt": 1, "at": now.isoformat()}])
        for n in range(3)
    )  # fmt: skip
    client = Client()
    client.force_login(user)
    driver = browser
    with running_worker(make_config(["emails"])):
        worker = wait_until(WorkerInstance.objects.first, timeout=30, what="the worker's snapshot")
        found = pages(client)
        assert KNOWN_PAGES <= set(found), f"custom pages found: {sorted(found)}"

        # The stock pages: a change list's breadcrumbs and a change form's Save button.
        _log_in(driver, live_server, reverse("admin:awa_queue_changelist"))
        wait_for(driver, "#result_list")
        stock = read(driver, CRUMBS, lambda c: c is not None and c["bar"]["background"] != "rgba(0, 0, 0, 0)")
        stock.pop("text")
        assert stock["bar"]["background"] != "rgba(0, 0, 0, 0)", stock  # the reference is styled itself
        driver.get(live_server.url + reverse("admin:awa_queue_change", args=[queue.pk]))
        save = wait_for(driver, "input[name=_save]")
        reference = driver.execute_script(
            "const s = getComputedStyle(arguments[0]);"
            " return {color: s.color, radius: s.borderTopLeftRadius, border: s.borderTopStyle, cursor: s.cursor}",
            save,
        )

        worker_page = reverse("admin:awa_workerinstance_change", args=[worker.pk])
        buttons_seen: dict[str, list[str]] = {}
        for name, url in [*sorted(found.items()), ("awa_workerinstance_change", worker_page)]:
            driver.get(live_server.url + url)
            crumbs = read(driver, CRUMBS, styled_like(stock))
            assert crumbs is not None, f"{name}: no breadcrumbs"
            assert {k: v for k, v in crumbs.items() if k != "text"} == stock, f"{name}: {crumbs}"
            assert crumbs["text"].startswith("Home"), f"{name}: {crumbs['text']}"
            buttons = read(driver, BUTTONS, admin_buttons(reference))
            assert admin_buttons(reference)(buttons), f"{name}: {buttons}"
            buttons_seen[name] = [b["label"] for b in buttons["buttons"]]
            screenshot(driver, f"page-{name}-{DJANGO}.png")

        # The pages with buttons were among those checked, with their buttons.
        assert {"Retry this group"} <= set(buttons_seen["awa_job_failures"])
        assert len(buttons_seen["awa_job_failures"]) >= 2  # and the group's delete
        assert "Stop" in buttons_seen["awa_job_bulk"]
        assert {"Drain and stop", "Stop claiming"} <= set(buttons_seen["awa_workerinstance_change"])

        # The Control panel is above the page's Close, not below it.
        driver.get(live_server.url + worker_page)
        wait_for(driver, "#awa-control")
        control_bottom, close_top = driver.execute_script(
            "return [document.getElementById('awa-control').getBoundingClientRect().bottom,"
            " document.querySelector('.submit-row .closelink').getBoundingClientRect().top]"
        )
        assert control_bottom <= close_top
