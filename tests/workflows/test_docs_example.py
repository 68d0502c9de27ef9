"""Workflows: the guide's example (docs/guide/workflows.md), kept verbatim (test_docs checks)."""

import pytest

from awa_django import JobContext, job
from awa_django.models import Job
from awa_django.testing import run_jobs
from awa_django.workflows import Workflow, always, chord, group, step


@job("report.fetch")
def fetch(url: str) -> dict:
    return {"url": url, "rows": 3}


@job("report.parse", takes_context=True)
def parse(context: JobContext) -> int:
    return context.upstream("fetch")["rows"]  # the upstream step named "fetch"


@job("report.publish", takes_context=True)
def publish(context: JobContext) -> str:
    return f"{context.upstream('parse')} rows from {context.upstream('fetch')['url']}"


@job("report.cleanup")
def cleanup() -> None:
    pass


@pytest.mark.django_db
def test_a_report_workflow_runs_in_dependency_order():
    wf = Workflow("report-42")
    fetched = wf.add("report.fetch", {"url": "https://example.com/a.csv"}, name="fetch")
    parsed = wf.add("report.parse", after=[fetched], name="parse")
    published = wf.add("report.publish", after=[fetched, parsed], name="publish")
    wf.add("report.cleanup", after=[always(published)])  # runs however publish ends
    wf.enqueue()  # one transaction: the workflow, its jobs and its edges

    assert Job.objects.get(pk=parsed.id).state == "waiting"
    report = run_jobs()

    assert report.kinds == ["report.fetch", "report.parse", "report.publish", "report.cleanup"]
    assert Job.objects.get(pk=published.id).result == "3 rows from https://example.com/a.csv"


@pytest.mark.django_db
def test_a_chord_fans_out_and_back_in():
    wf = Workflow("fan-out")
    urls = [f"https://example.com/{i}.csv" for i in range(3)]
    [total] = wf.extend(
        chord(group(*(step("report.fetch", {"url": u}, name="fetch") for u in urls)), step("report.cleanup"))
    )
    wf.enqueue()

    run_jobs()

    assert Job.objects.get(pk=total.id).state == "completed"
