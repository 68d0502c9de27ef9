"""The job's error history in the admin names the retry rule that decided an attempt."""

from __future__ import annotations

from django.contrib import admin

from awa_django.models import Job


def test_errors_pretty__shows_the_rule_that_decided_and_escapes_it() -> None:
    job_admin = admin.site._registry[Job]
    job = Job(
        kind="k",
        errors=[
            {
                "error": "ValueError: bad",
                "attempt": 1,
                "at": "2026-12-01T00:00:00+00:00",
                "rule": "discard_on <ValueError>",
            },
            {"error": "KeyError: x", "attempt": 2, "at": "2026-12-01T00:00:01+00:00"},
        ],
    )

    html = job_admin.errors_pretty(job)  # type: ignore[attr-defined]

    assert html.count("awa-error-rule") == 1
    assert "rule: discard_on &lt;ValueError&gt;" in html
