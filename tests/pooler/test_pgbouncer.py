"""awa_django behind a real PgBouncer in transaction pooling mode (tests/pooler/pgbouncer.py).

Every process under test (enqueue clients, ``awa_worker`` subprocesses, ``manage.py check``) runs
testproject.settings_pooler: its Django connection goes through PgBouncer. The test itself reads
and writes rows on its own direct connection. The first tests show the pooler really hands one
client's statements to other server sessions (so a setting that did not take effect would fail
the rest); the others run the product through it and read its logs, and PgBouncer's, for the
errors session state causes there.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db.models.functions import Now

from awa_django.models import Job, LeaderLease, Schedule, WorkerInstance
from awa_django.services.schedules import save_schedule
from tests.harness import ROOT, wait_until
from tests.pooler.conftest import PoolerSpawner, direct_url, pooler_env
from tests.pooler.pgbouncer import PgBouncer
from tests.worker.support import SpawnedWorker, bring_forward, state_counts, wait_for_row

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKER_ARGS = ("--heartbeat-interval", "0.5", "--heartbeat-staleness", "3", "--poll-interval", "0.2")
# What session state lost behind a transaction pooler looks like, in our logs or PgBouncer's.
# The session-state failures, in any case, and log records at level ERROR (the level's own word:
# job outcome lines carry the job's error text, e.g. "error='...DemoFailureError: boom'").
SESSION_STATE_ERRORS = re.compile(
    r"(?i:prepared statement|does not exist|advisory|lost its lease|could not resign|Traceback|"
    r"maintenance round failed|server_reset)|\bERROR\b"
)

ENQUEUE_CLIENTS = """
import json, threading
from django.db import connection, transaction
from awa_django.models import Job

errors = []

def client(n):
    try:
        for i in range(25):
            Job.objects.enqueue("noop", {"client": n, "i": i}, queue="pooled")
            with transaction.atomic():
                Job.objects.enqueue("noop", {"client": n, "i": i, "atomic": True}, queue="pooled")
        Job.objects.enqueue_many([{"kind": "noop", "queue": "pooled", "args": {"client": n}} for _ in range(40)])
    except Exception as exc:
        errors.append(repr(exc))
    finally:
        connection.close()

threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("RESULT " + json.dumps(errors))
"""
CLIENTS, PER_CLIENT = 4, 25 * 2 + 40


def run_manage(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def enqueue_through(bouncer: PgBouncer, **env_kw: Any) -> list[str]:
    """Run four threads enqueuing through PgBouncer; return the errors they hit."""
    env = pooler_env(bouncer, **env_kw)
    env["DJANGO_DEBUG"] = "false"  # with DEBUG Django records queries and enqueue never prepares
    done = run_manage(env, "shell", "-c", ENQUEUE_CLIENTS)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout + done.stderr
    errors: list[str] = json.loads(lines[-1].removeprefix("RESULT "))
    return errors


def wait_showing(workers: list[SpawnedWorker], predicate: Any, timeout: float, what: str) -> Any:
    """wait_until, and on a timeout the workers' logs in the failure."""
    try:
        return wait_until(predicate, timeout=timeout, what=what)
    except AssertionError as exc:
        logs = "\n".join(f"--- {w.log_path.name}:\n{w.log[-3000:]}" for w in workers)
        raise AssertionError(f"{exc}\n{logs}") from None


def assert_clean(*logs: str) -> None:
    for log in logs:
        found = SESSION_STATE_ERRORS.findall(log)
        assert not found, f"{found[:5]} in:\n{log[-4000:]}"


def instance_of(worker: SpawnedWorker) -> Any:
    row = WorkerInstance.objects.filter(pid=worker.process.pid).first()
    return row.instance_id if row else None


def test_pgbouncer__hands_one_client_other_server_sessions(bouncer: PgBouncer) -> None:
    """The ground the other tests stand on: two open clients share one backend, and a statement
    psycopg prepared in one server session is unknown or taken in the next."""
    dbname = Job.objects.db  # noqa: F841 - the test database exists
    from django.db import connection

    url = bouncer.url(connection.settings_dict["NAME"])
    with psycopg.connect(url, autocommit=True) as a, psycopg.connect(url, autocommit=True) as b:
        pids = set()
        for _ in range(5):
            pids.add(a.execute("SELECT pg_backend_pid()").fetchone())
            pids.add(b.execute("SELECT pg_backend_pid()").fetchone())
        assert len(pids) < 10, "each client kept its own backend: this is not transaction pooling"
        a.prepare_threshold = b.prepare_threshold = 0
        with pytest.raises(psycopg.errors.DatabaseError, match="prepared statement"):
            for i in range(10):
                a.execute("SELECT %s::int", (i,))
                b.execute("SELECT %s::int", (i,))


def test_enqueue__without_the_pooler_setting__prepared_statements_break(bouncer: PgBouncer) -> None:
    errors = enqueue_through(bouncer, pooler="")

    assert errors, "enqueue prepared its statement behind a transaction pooler and nothing broke"
    assert any("prepared statement" in error for error in errors), errors


def test_enqueue__pooler_transaction__every_job_is_written(bouncer: PgBouncer) -> None:
    errors = enqueue_through(bouncer)

    assert errors == []
    assert Job.objects.filter(queue="pooled").count() == CLIENTS * PER_CLIENT
    for n in range(CLIENTS):
        assert Job.objects.filter(queue="pooled", args__client=n).count() == PER_CLIENT


def test_check__recognises_the_transaction_pooler_and_names_the_setting(bouncer: PgBouncer) -> None:
    unset = run_manage(pooler_env(bouncer, pooler=""), "check", "--database", "default")
    assert "awa.W006" in unset.stderr + unset.stdout, unset.stderr
    assert "AWA['POOLER'] = 'transaction'" in unset.stderr + unset.stdout

    configured = run_manage(pooler_env(bouncer), "check", "--database", "default")
    assert configured.returncode == 0, configured.stderr
    assert "awa.W006" not in configured.stderr + configured.stdout
    assert "awa.W004" in configured.stderr + configured.stdout  # polling only: said, with the fix


def test_worker__drains_retries_and_elects_a_lease_leader(spawn_pooled: PoolerSpawner, bouncer: PgBouncer) -> None:
    jobs = 300
    Job.objects.enqueue_many([{"kind": "record", "queue": "pooled", "args": {"seconds": 0.01}} for _ in range(jobs)])
    failing = Job.objects.enqueue("fail", {"message": "boom"}, queue="pooled", max_attempts=3)
    later = Job.objects.enqueue("noop", queue="pooled", run_at=None)
    Job.objects.filter(pk=later.pk).update(state="scheduled", run_at=Now() + timedelta(seconds=1))
    workers = [spawn_pooled("-q", "pooled", *WORKER_ARGS, name="w0")]
    # The second starts once the first is up: two workers creating the code's Schedule rows at the
    # same instant race on their primary key (a startup race outside this test's subject).
    wait_until(lambda: instance_of(workers[0]), what="the first worker's snapshot")
    workers.append(spawn_pooled("-q", "pooled", *WORKER_ARGS, name="w1"))

    wait_showing(workers, lambda: Job.objects.filter(queue="pooled", kind="record", state="completed").count() == jobs,
                 timeout=120, what=f"{jobs} jobs completed through PgBouncer")  # fmt: skip
    for attempt in (1, 2):
        wait_for_row(failing.pk, state="retryable", attempt=attempt)
        bring_forward(failing.pk)  # the leader promotes it; no waiting out the backoff
    failed = wait_for_row(failing.pk, state="failed")
    assert [e["attempt"] for e in failed.errors] == [1, 2, 3]
    wait_for_row(later.pk, state="completed")  # promoted by the leader, then claimed

    # Both workers up (the second may still be starting on a loaded machine: a SIGTERM before its
    # signal handlers are installed ends it with -15, not a clean stop).
    wait_until(lambda: all(instance_of(worker) for worker in workers), what="both workers' snapshots")
    lease = LeaderLease.objects.get(name="maintenance")
    instances = {instance_of(worker) for worker in workers}
    assert lease.holder in instances
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait_exit() == 0, worker.log[-4000:]
    assert not LeaderLease.objects.filter(name="maintenance").exists(), "the leader did not resign"
    assert_clean(*(worker.log for worker in workers), bouncer.log)


def test_worker__sigkill__rescued_and_leadership_fails_over(spawn_pooled: PoolerSpawner, bouncer: PgBouncer) -> None:
    first = spawn_pooled("-q", "pooled", *WORKER_ARGS, name="first")
    wait_until(lambda: LeaderLease.objects.filter(name="maintenance").exists(), what="a leader lease")
    second = spawn_pooled("-q", "pooled", *WORKER_ARGS, name="second")
    wait_until(lambda: instance_of(first) and instance_of(second), what="both workers' snapshots")
    lease = LeaderLease.objects.get(name="maintenance")
    assert lease.holder == instance_of(first)

    job = Job.objects.enqueue("sleep", {"seconds": 1.0}, queue="pooled")
    wait_for_row(job.pk, state="running")
    holder = WorkerInstance.objects.get(instance_id=lease.holder)
    doomed, survivor = (first, second) if holder.pid == first.process.pid else (second, first)
    running_on = Job.objects.get(pk=job.pk)
    # The leader dies, and with it (if it held the job) a running job: both must be taken over.
    doomed.signal(signal.SIGKILL)
    doomed.wait_exit()

    taken = wait_until(
        lambda: LeaderLease.objects.filter(name="maintenance", holder=instance_of(survivor)).first(),
        timeout=60,
        what="the survivor to take the lease over",
    )
    assert taken.term == lease.term + 1
    done = wait_for_row(job.pk, state="completed", timeout=60)
    if running_on.attempted_at and done.attempt == 2:
        assert "rescued" in done.errors[0]["error"]
    # Maintenance keeps running on the new leader: a due scheduled job is promoted and run.
    later = Job.objects.enqueue("noop", queue="pooled")
    Job.objects.filter(pk=later.pk).update(state="scheduled", run_at=Now() + timedelta(seconds=1))
    wait_for_row(later.pk, state="completed", timeout=60)

    survivor.signal(signal.SIGTERM)
    assert survivor.wait_exit() == 0, survivor.log[-4000:]
    assert_clean(survivor.log, bouncer.log)


def test_worker__rescues_the_jobs_a_killed_worker_left_running(spawn_pooled: PoolerSpawner, bouncer: PgBouncer) -> None:
    jobs = [Job.objects.enqueue("sleep", {"seconds": 30.0}, queue="doomed") for _ in range(3)]
    doomed = spawn_pooled("-q", "doomed", *WORKER_ARGS, name="doomed")
    for job in jobs:
        wait_for_row(job.pk, state="running")
    doomed.signal(signal.SIGKILL)
    doomed.wait_exit()
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(args={"seconds": 0.01})  # the next attempt is short
    rescuer = spawn_pooled("-q", "doomed", *WORKER_ARGS, name="rescuer")

    for job in jobs:
        done = wait_for_row(job.pk, state="completed", timeout=90)
        assert (done.attempt, len(done.errors)) == (2, 1)
        assert "rescued" in done.errors[0]["error"]
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait_exit() == 0, rescuer.log[-4000:]
    assert state_counts() == {"completed": 3}
    assert_clean(rescuer.log, bouncer.log)


def test_worker__cron_fires_through_the_pooler(spawn_pooled: PoolerSpawner, bouncer: PgBouncer) -> None:
    save_schedule(Schedule(name="pooled-tick", kind="noop", cron="* * * * * *", queue="pooled"))
    worker = spawn_pooled("-q", "pooled", *WORKER_ARGS, name="cron")

    wait_until(
        lambda: Job.objects.filter(metadata__schedule="pooled-tick", state="completed").count() >= 3,
        timeout=60,
        what="three fired slots completed",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-4000:]
    assert_clean(worker.log, bouncer.log)


@pytest.mark.parametrize("listen", [True, False], ids=["listen-url", "polling"])
def test_worker__listens_only_on_the_direct_connection(tmp_path: Any, transactional_db: None, bouncer: PgBouncer,
                                                      listen: bool) -> None:  # fmt: skip
    spawner = PoolerSpawner(tmp_path, pooler_env(bouncer, listen_url=direct_url() if listen else None))
    try:
        worker = spawner("-q", "pooled", *WORKER_ARGS, name="listen")
        snapshot = wait_until(lambda: WorkerInstance.objects.filter(pid=worker.process.pid).first(), what="snapshot")
        if listen:
            wait_until(
                lambda: WorkerInstance.objects.get(pk=snapshot.pk).flags.get("listening"),
                what="the worker to be listening on LISTEN_DATABASE_URL",
            )
        job = Job.objects.enqueue("noop", queue="pooled")
        wait_for_row(job.pk, state="completed")
        flags = WorkerInstance.objects.get(pk=snapshot.pk).flags
        assert bool(flags.get("listening")) is listen, flags
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit() == 0, worker.log[-4000:]
        assert_clean(worker.log, bouncer.log)
    finally:
        spawner.reap()
