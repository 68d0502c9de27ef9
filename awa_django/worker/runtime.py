"""The runtime context: what the worker's parts share, handed to each of them instead of the ``Worker``.

The supervisor builds one ``Runtime`` and gives it to every side loop (LISTEN and the backlog
probe, the look-behind, heartbeats, snapshots, reconfiguration, maintenance, cluster capacity).
They read the configuration, the allocator, the pool and the stop from it, ask the queues'
runners through ``runners`` and the running attempts through ``attempts``; none of them imports
the supervisor. ``config`` is the one field that changes: live reconfiguration replaces it when
Queue rows change.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator
from awa_django.observability.sink import MetricsSink
from awa_django.registry import Registry
from awa_django.worker.attempts import Attempts
from awa_django.worker.config import WorkerConfig
from awa_django.worker.runner import Runners
from awa_django.worker.stop import Stop


@dataclass(frozen=True, slots=True)
class Identity:
    """This worker process, as its snapshot row, the election and cluster capacity name it."""

    instance_id: uuid.UUID = field(default_factory=uuid.uuid4)
    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def key(self) -> str:
        return str(self.instance_id)

    @property
    def name(self) -> str:
        """``host:pid``, as ``WorkerInstance`` names the worker; what claims write to ``Job.attempted_by``."""
        return f"{self.hostname}:{self.pid}"


@dataclass(eq=False)
class Runtime:
    config: WorkerConfig  # replaced by live reconfiguration when Queue rows change
    identity: Identity
    allocator: Allocator
    pool: AsyncConnectionPool
    registry: Registry
    metrics: MetricsSink
    stop: Stop
    runners: Runners
    attempts: Attempts
