"""Durable jobs behind PgBouncer in transaction mode: steps, a durable sleep, a wait, and signals
sent by another process, all through the pooler.

Each step's record is one autocommit statement, a park is written by the worker's batched writer,
and a signal is two statements in the caller's transaction: nothing needs a session of its own, so
nothing breaks when the pooler hands each transaction another server connection. The handler is
``demo_durable_effects`` (testproject/demo/durable_jobs.py), whose steps count their runs as rows
of ``demo_step_effect``; the workers and the signalling process reach Postgres through PgBouncer,
the test reads the rows on its own direct connection.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest
from django.db import connection

from awa_django.models import Job, JobStep
from testproject.demo.durable_jobs import EFFECT_COLUMNS
from tests.harness import ROOT
from tests.pooler.conftest import PoolerSpawner, pooler_env
from tests.pooler.pgbouncer import PgBouncer
from tests.pooler.test_pgbouncer import WORKER_ARGS, assert_clean, wait_showing

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

QUEUE = "pooled_durable"
JOBS = 20
STEPS = 4
ARGS = {"steps": STEPS, "sleep": 0.3, "wait": "go"}  # s1 s2, a sleep, a wait for "go", s3 s4

# Signals each job of stdin's list (a JSON list of ids) with "go", each in a transaction of its own
# (a signal joins the caller's transaction), and prints whether each woke its job.
SIGNAL = """
import json, sys
from django.db import transaction
from awa_django.models import Job

woke = []
for job_id in json.load(sys.stdin):
    with transaction.atomic():
        woke.append(Job.objects.signal(job_id, "go", {"by": job_id}).woke)
print("RESULT " + json.dumps(woke))
"""


@pytest.fixture
def effects() -> Iterator[None]:
    """demo_step_effect (which no migration creates), empty."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE demo_step_effect ({EFFECT_COLUMNS})")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE demo_step_effect")


def _signal_through(bouncer: PgBouncer, ids: list[int]) -> tuple[list[bool], str]:
    """Signal the jobs from a ``manage.py shell`` whose connection goes through PgBouncer: what
    each signal returned (woke), and the process's stderr."""
    env = pooler_env(bouncer)
    env["DJANGO_DEBUG"] = "false"  # as in production: Django records no queries
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", SIGNAL],
        cwd=ROOT,
        env=env,
        input=json.dumps(ids),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout + done.stderr
    woke: list[bool] = json.loads(lines[-1].removeprefix("RESULT "))
    return woke, done.stderr


def _states(ids: list[int]) -> Counter[str]:
    return Counter(Job.objects.filter(id__in=ids).values_list("state", flat=True))


def test_durable__behind_pgbouncer__steps_sleep_wait_and_signals(
    spawn_pooled: PoolerSpawner, bouncer: PgBouncer, effects: None
) -> None:
    ids = [Job.objects.enqueue("demo_durable_effects", ARGS, queue=QUEUE).id for _ in range(JOBS)]
    early, late = ids[::2], ids[1::2]
    # Sent before the jobs run: kept, and taken when their wait is reached.
    woke, early_stderr = _signal_through(bouncer, early)
    assert woke == [False] * len(early)

    workers = [spawn_pooled("-q", QUEUE, *WORKER_ARGS, name="w0")]
    wait_showing(workers, lambda: Job.objects.filter(id__in=ids).exclude(state="available").exists(), timeout=60,
                 what="the first worker to claim")  # fmt: skip
    workers.append(spawn_pooled("-q", QUEUE, *WORKER_ARGS, name="w1"))
    wait_showing(
        workers,
        lambda: _states(early)["completed"] == len(early) and _states(late)["waiting"] == len(late),
        timeout=120,
        what="the early-signalled jobs completed, the others parked waiting",
    )
    assert all(job.attempt == 0 for job in Job.objects.filter(id__in=late))  # parked: their attempts given back
    woke, late_stderr = _signal_through(bouncer, late)
    assert woke == [True] * len(late)
    wait_showing(workers, lambda: _states(ids)["completed"] == JOBS, timeout=120, what=f"{JOBS} jobs completed")

    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait_exit() == 0, worker.log[-4000:]

    with connection.cursor() as cursor:
        cursor.execute("SELECT job_id, step, count(*) FROM demo_step_effect GROUP BY job_id, step")
        runs = {(job_id, step): n for job_id, step, n in cursor.fetchall()}
    assert runs == {(job_id, f"s{i}"): 1 for job_id in ids for i in range(1, STEPS + 1)}  # each step ran once
    for job in Job.objects.filter(id__in=ids):
        assert job.attempt == 1, (job.id, job.attempt, job.errors)  # no attempt failed
        assert job.result is not None and job.result["payload"] == {"by": job.id}
        steps = {step.name: step for step in JobStep.objects.filter(job_id=job.id)}
        assert sorted(steps) == ["s1", "s2", "s3", "s4", "sleep#1", "wait:go#1"]
        assert steps["wait:go#1"].result == {"by": job.id}
        assert steps["wait:go#1"].finished_at is not None
    assert_clean(*(worker.log for worker in workers), bouncer.log, early_stderr, late_stderr)
