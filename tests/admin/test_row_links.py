"""The job list's row links (JobChangeList.url_for_result, made from one reversed URL) are the links
Django's own rendering makes: reverse() of the job's page, then add_preserved_filters with the
list's filters, for any filter and search, so "back to the list" from a job keeps them."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.contrib import admin
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.test import Client
from django.urls import reverse

from awa_django.models import Job

QUERIES = [
    {},
    {"state__exact": "failed"},
    {"state__exact": "failed", "q": 'error:"gate way" & ü', "o": "1"},
    {"q": "user_id=7", "every_state": "1", "p": "1"},
]


@pytest.mark.django_db
@pytest.mark.parametrize("query", QUERIES)
def test_row_links_are_the_ones_django_makes(admin_client: Client, query: dict[str, str]) -> None:
    Job.objects.bulk_create(Job(kind="k", state="failed", args={"user_id": 7}) for _ in range(3))
    response = admin_client.get(reverse("admin:awa_job_changelist"), query)
    assert response.status_code == 200
    model_admin = admin.site._registry[Job]
    preserved = model_admin.get_preserved_filters(response.wsgi_request)
    rows = response.context["cl"].result_list
    links = [
        unescape(href) for href in re.findall(r'<th class="field-id"><a href="([^"]+)"', response.content.decode())
    ]
    expected = [
        add_preserved_filters(
            {"preserved_filters": preserved, "opts": Job._meta}, reverse("admin:awa_job_change", args=[job.pk])
        )
        for job in rows
    ]
    assert links == expected
    assert (("_changelist_filters=" in links[0]) == bool(query)) if links else not rows
