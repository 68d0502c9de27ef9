"""Who leads maintenance: one worker at a time, chosen in Postgres.

Two elections behind one small door (``Election``), chosen by AWA["POOLER"]:

- ``AdvisoryLockElection`` (a direct connection or a session pooler, the default): a session-level
  advisory lock on the maintenance connection. Postgres drops it the moment that session ends, so
  a dead leader is replaced on the next round of any other worker.
- ``LeaseElection`` (AWA["POOLER"] = "transaction"): a transaction pooler does not keep a session
  for its client, so a session lock would be taken on one server session and the next statement
  could run on another. Instead the leader holds a row (``awa_leader_lease``) whose expiry is on
  the database clock: it renews the lease at the start of every round and acts only when the
  renewal succeeded; another worker takes the row over, with one compare-and-swap statement, only
  after it expired. A stopping leader deletes its row, so failover is immediate; a killed one is
  replaced within ``ttl``.

Invariant and its limit: a worker runs a round only right after the database confirmed it holds
the leadership. With a lease, a leader paused for longer than ``ttl`` in the middle of a round
can overlap with its successor's first round; every duty is written to be safe then (the claim
and rescue statements lock rows, schedules fire by compare-and-swap, cluster planning locks the
capacity rows in one transaction), so an overlap costs duplicate work, never a duplicate job.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any, Protocol

import psycopg

from awa_django.sql import statements

logger = logging.getLogger(__name__)

# pg_try_advisory_lock key: "awa!" and "lead" as two int32s, clear in pg_locks.
LEADER_LOCK = (0x61776121, 0x6C656164)
MAINTENANCE_LEASE = "maintenance"


class Election(Protocol):
    """What the maintenance loop needs from an election; ``conn`` is its dedicated autocommit connection."""

    async def campaign(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """True when this worker leads for the round about to run (taking or keeping the leadership)."""
        ...

    async def resign(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Give the leadership up at shutdown, so another worker takes over at once."""
        ...

    def connection_lost(self) -> None:
        """The connection ``campaign`` ran on is gone (with it any session state)."""
        ...


class AdvisoryLockElection:
    """The session advisory lock ``LEADER_LOCK``: held as long as the connection lives."""

    def __init__(self) -> None:
        self.held = False

    async def campaign(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        if not self.held:
            cursor = await conn.execute(statements["try_leader_lock"], {"key1": LEADER_LOCK[0], "key2": LEADER_LOCK[1]})
            row = await cursor.fetchone()
            self.held = bool(row and row[0])
        return self.held

    async def resign(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # Closing the connection releases the lock; nothing to write.
        self.held = False

    def connection_lost(self) -> None:
        self.held = False


class LeaseElection:
    """A lease row renewed every round; safe behind a transaction pooler (no session state)."""

    def __init__(self, holder: uuid.UUID, ttl: float, name: str = MAINTENANCE_LEASE) -> None:
        if ttl <= 0:
            raise ValueError(f"the leader lease ttl is {ttl!r}; it must be a number of seconds above 0")
        self.holder = holder
        self.ttl = timedelta(seconds=ttl)
        self.name = name
        self.term: int | None = None  # the lease's term while this worker holds it

    async def campaign(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        cursor = await conn.execute(
            statements["acquire_leader_lease"], {"name": self.name, "holder": self.holder, "ttl": self.ttl}
        )
        row = await cursor.fetchone()
        if row is None:
            if self.term is not None:
                logger.warning(
                    "maintenance leader lost its lease (it expired before a renewal) lease=%s term=%s instance=%s",
                    self.name,
                    self.term,
                    self.holder,
                )
            self.term = None
            return False
        self.term = int(row[0])
        return True

    async def resign(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self.term is None:
            return
        await conn.execute(statements["release_leader_lease"], {"name": self.name, "holder": self.holder})
        logger.info(
            "maintenance leader released its lease lease=%s term=%s instance=%s", self.name, self.term, self.holder
        )
        self.term = None

    def connection_lost(self) -> None:
        # The lease lives in a row, not in the session: it is still ours until it expires, and the
        # next campaign on a new connection renews it (or finds it taken over).
        pass


def election_for(holder: uuid.UUID, ttl: float, *, transaction_pooler: bool) -> Election:
    """The election the deployment needs: a lease behind a transaction pooler, the advisory lock otherwise."""
    if transaction_pooler:
        return LeaseElection(holder, ttl)
    return AdvisoryLockElection()
