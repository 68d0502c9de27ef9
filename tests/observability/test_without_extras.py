"""Nothing breaks without the extras: prometheus-client and opentelemetry are made unimportable in
a real worker subprocess (a directory of packages that raise ImportError, first on its path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from awa_django.models import Job
from tests.harness import ROOT, worker_env
from tests.worker.support import Spawner, wait_for_row

SCRIPT = """
import django
django.setup()
from awa_django.exceptions import ConfigurationError
from awa_django.models import Job
from awa_django.observability import load_sink, tracing
from awa_django.observability.sink import NoopSink
assert tracing.with_traceparent(None) is None
with tracing.attempt_span(None) as span:
    assert span is None
assert isinstance(load_sink("none"), NoopSink)
for name, extra in (("prometheus", "awa-django[metrics]"), ("otel", "awa-django[otel]")):
    try:
        load_sink(name)
    except ConfigurationError as exc:
        assert extra in str(exc), exc
    else:
        raise AssertionError(name + " loaded without its package")
job = Job.objects.enqueue("noop", metadata={"a": 1})
assert Job.objects.get(pk=job.pk).metadata == {"a": 1}
Job.objects.filter(pk=job.pk).delete()
from django.test import Client, override_settings
with override_settings(AWA={"METRICS_OPEN": True}):
    response = Client().get("/awa/metrics")
assert response.status_code == 501 and b"awa-django[metrics]" in response.content, response.content
print("OK")
"""


@pytest.fixture
def blocked(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import prometheus_client`, `import opentelemetry` and `import uvloop` fail."""
    blocker = tmp_path / "blocked"
    for package in ("prometheus_client", "opentelemetry", "uvloop"):
        (blocker / package).mkdir(parents=True)
        (blocker / package / "__init__.py").write_text(f"raise ImportError('{package} is not installed (test)')\n")
    path = os.pathsep.join(p for p in [str(blocker), str(ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return worker_env(PYTHONPATH=path)


@pytest.mark.django_db(transaction=True)
def test_without_extras__enqueue_sinks_and_view_say_what_to_install(blocked: dict[str, str]) -> None:
    env = {**blocked, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr


@pytest.mark.slow
def test_without_extras__worker_runs_jobs_and_logs_them_at_v3(spawn: Spawner, blocked: dict[str, str]) -> None:
    from tests.harness import spawn_worker, wait_until
    from tests.worker.support import SpawnedWorker

    log = spawn.tmp_path / "plain.log"
    worker = SpawnedWorker(spawn_worker("-q", "plain", "-v", "3", env=blocked, log=log), log)
    spawn.started.append(worker)
    jobs = [Job.objects.enqueue("noop", queue="plain") for _ in range(3)]
    for job in jobs:
        wait_for_row(job.pk, state="completed", timeout=60)
    worker.assert_alive()
    # A job's "completed" line is logged after its write commits: the row can read completed
    # before the line reaches the log file (a loaded machine showed it), so wait for the lines.
    lines = [f"job completed job_id={job.pk} kind=noop queue=plain attempt=1 duration_ms=" for job in jobs]
    wait_until(lambda: all(line in worker.log for line in lines), timeout=30, what="the completed lines in the log")
    text = worker.log
    assert "claimed queue=plain" in text
    assert "event loop asyncio" in text  # AWA['EVENT_LOOP'] "auto" without uvloop: the standard loop
    assert "notified channel=awa_jobs payload=plain" in text or "backlog probe wakes queue=plain" in text


@pytest.mark.slow
def test_without_extras__asking_for_prometheus_fails_naming_the_extra(
    spawn: Spawner, blocked: dict[str, str], transactional_db: None
) -> None:
    from tests.harness import spawn_worker
    from tests.worker.support import SpawnedWorker

    log = spawn.tmp_path / "asked.log"
    worker = SpawnedWorker(spawn_worker("-q", "plain", "--metrics-port", "9", env=blocked, log=log), log)
    spawn.started.append(worker)
    assert worker.wait_exit(60) != 0
    assert "metrics 'prometheus' needs the prometheus_client package" in worker.log
    assert "pip install 'awa-django[metrics]'" in worker.log


SDK_LATER = """
from types import SimpleNamespace
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from awa_django.observability import tracing
job = SimpleNamespace(id=1, kind="k", queue="q", attempt=1, max_attempts=1, priority=2, metadata={})
assert not tracing.spans_recorded()
with tracing.attempt_span(job) as span:
    assert span is None, span  # the API alone: no span is built
trace.set_tracer_provider(TracerProvider())
assert tracing.spans_recorded()
with tracing.attempt_span(job) as span:
    assert span is not None and span.is_recording(), span  # a provider set later is picked up
print("OK")
"""


@pytest.mark.subprocess
def test_tracing__no_span_is_built_until_a_recording_provider_is_set() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SDK_LATER], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr
