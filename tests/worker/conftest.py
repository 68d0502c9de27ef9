"""Fixtures for end-to-end worker tests: subprocesses that are always reaped, gates always opened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.privateserver import PrivateServer
from tests.worker.support import Gates, Spawner


@pytest.fixture
def spawn(tmp_path: Path, transactional_db: None) -> Iterator[Spawner]:
    """Start worker subprocesses on the test database; any still running at teardown is killed,
    so that none outlives the test (or holds connections to the test database)."""
    spawner = Spawner(tmp_path)
    try:
        yield spawner
    finally:
        spawner.reap()


@pytest.fixture
def gates() -> Iterator[Gates]:
    """Gates are all opened at teardown, so a failing test does not leave a handler waiting."""
    value = Gates()
    try:
        yield value
    finally:
        value.open_all()


@pytest.fixture
def spawn_private(server: PrivateServer, tmp_path: Path) -> Iterator[Spawner]:
    """Workers on the private server of the module's ``server`` fixture (tests/privateserver.py);
    any still running at teardown is killed."""
    spawner = Spawner(tmp_path, env=server.env())
    try:
        yield spawner
    finally:
        spawner.reap()
