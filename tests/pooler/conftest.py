"""Fixtures for the tests behind a real PgBouncer (transaction pooling) in front of the test Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from tests.harness import worker_env
from tests.pooler import pgbouncer
from tests.pooler.pgbouncer import PgBouncer
from tests.worker.support import SpawnedWorker, Spawner

if pgbouncer.PGBOUNCER is None:
    pytest.skip("Debian's pgbouncer is not installed (run .ci/pgbouncer-deps; CI installs it)", allow_module_level=True)

POOLER_SETTINGS = "testproject.settings_pooler"


@pytest.fixture(scope="session")
def bouncer(django_db_setup: None, django_db_blocker: object) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode for the whole session (20 server connections for every client)."""
    running = pgbouncer.start(dict(connection.settings_dict))
    try:
        yield running
    finally:
        running.stop()


def direct_url() -> str:
    """A libpq URL of a direct connection to the test database (for LISTEN_DATABASE_URL)."""
    params = connection.settings_dict
    host = str(params.get("HOST") or (params.get("OPTIONS") or {}).get("host") or "")  # or ?host= of DATABASE_URL
    # The password too, when the server asks for one (a DATABASE_URL server over TCP).
    password = f":{quote(str(params['PASSWORD']), safe='')}" if params.get("PASSWORD") else ""
    user = quote(str(params.get("USER") or "postgres"), safe="") + password
    if host.startswith("/"):
        return f"postgresql://{user}@/{params['NAME']}?host={host}" + (
            f"&port={params['PORT']}" if params.get("PORT") else ""
        )
    return f"postgresql://{user}@{host}:{params.get('PORT') or 5432}/{params['NAME']}"


def pooler_env(bouncer: PgBouncer, *, pooler: str = "transaction", listen_url: str | None = None) -> dict[str, str]:
    """Environment for a process whose Django connects through ``bouncer``."""
    env = worker_env(
        DJANGO_SETTINGS_MODULE=POOLER_SETTINGS,
        AWA_PGBOUNCER_PORT=str(bouncer.port),
        AWA_POOLER=pooler,
    )
    env.pop("AWA_LISTEN_DATABASE_URL", None)
    if listen_url:
        env["AWA_LISTEN_DATABASE_URL"] = listen_url
    return env


class PoolerSpawner(Spawner):
    """Starts ``awa_worker`` subprocesses that reach Postgres through PgBouncer."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        super().__init__(tmp_path)
        self.env = env

    def __call__(self, *args: str, name: str = "worker") -> SpawnedWorker:
        from tests.harness import spawn_worker

        log_path = self.tmp_path / f"{name}-{len(self.started)}.log"
        worker = SpawnedWorker(spawn_worker(*args, env=self.env, log=log_path), log_path)
        self.started.append(worker)
        return worker


@pytest.fixture
def spawn_pooled(tmp_path: Path, transactional_db: None, bouncer: PgBouncer) -> Iterator[PoolerSpawner]:
    spawner = PoolerSpawner(tmp_path, pooler_env(bouncer))
    try:
        yield spawner
    finally:
        spawner.reap()
