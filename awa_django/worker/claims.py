"""A queue's claims as values: ``Claim``, and the ``ClaimSource`` that plans and settles them.

A queue runner (worker/runner.py) writes the phases of its poll once: take permits, plan a claim
for them, run it, settle it with the rows that came back, start a job on each permit it filled. The
writer's hand-over (worker/completer.py) is the same claim, run in the writer's round trip after
its batch's writes: planned by the runner's source when the permits are freed, settled when the
write returns. What differs between ways of claiming lives in the source, never in the loop:

- ``plain.PlainSource``: claim_jobs over the priority lanes, from the lane cursors (lanes.py);
- ``keyed.KeyedSource``: the queue shares its slots by fair key: discovery of the keys with due
  jobs, grants by ``KeyShares``, claim_keyed_jobs, exact caps.

A source that honours some other rule (a per-key rate limit, say) is a third implementation of
``ClaimSource``; the runner, the writer and ``Runners`` do not change.

A ``Claim`` carries everything the one who runs it needs (the permits it fills, the statement, its
parameters, the row decoder) and the source that planned it, which alone reads its parameters back
when it settles. The writer runs ``statement`` with ``params`` through ``rows``; nothing in it
knows which source planned it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Permit
from awa_django.concurrency.keyconfig import QueueKeySettings
from awa_django.context import ClaimedJob, ClaimRows
from awa_django.sql import statements
from awa_django.worker.lanes import LaneCursors


class Looks(Protocol):
    """What a source tells its queue's backlog belief (backlog.Backlog) of the looks it takes."""

    def look_began(self) -> None:
        """A look at the queue's due jobs began (a claim; an arrival read or a key sweep)."""
        ...

    def found(self) -> None:
        """A look saw due jobs, or something to claim became possible: look again."""
        ...


@dataclass(eq=False, slots=True)
class Claim:
    """One claim of a queue: the permits it fills (one per row, in order), the statement and its
    parameters, the row decoder (``ClaimRows`` keeps whether a due job was left past the rows), the
    source that planned it, and ``seen``: the backlog's announcement count when it was planned
    (a claim planned before an announcement cannot tell that the queue ran dry)."""

    source: ClaimSource
    permits: Sequence[Permit]  # a `Permits` from the allocator: a Permit is made per row only
    statement: str
    params: dict[str, Any]
    seen: int = 0
    rows: ClaimRows = field(default_factory=ClaimRows)

    @property
    def queue(self) -> str:
        return str(self.params["queue"])


class ClaimSource(Protocol):
    """How a queue claims: the strategy its runner's one loop goes through."""

    lanes: LaneCursors
    # Whether the look-behind (lookbehind.py) rewinds this source's lane cursors (the claim's scan
    # starts there), and whether the backlog probe's "nothing due past the cursors" means the queue
    # ran dry (it does not when the cursors are discovery cursors: jobs behind them are known).
    rewinds_lanes: bool
    probe_sees_all: bool

    @property
    def hands_over(self) -> bool:
        """Whether a claim of this source may be planned for the writer's round trip now."""
        ...

    def announced(self) -> None:
        """New jobs were announced (a NOTIFY, the probe, a settings change)."""
        ...

    async def discover(self, pool: AsyncConnectionPool, looks: Looks) -> None:
        """The source's own looks, before the poll, whether or not the queue believes it has backlog
        (a plain queue's look for fair keys before its first claim; a keyed queue's start and its
        key sweep when due). A source may replace itself here."""
        ...

    async def ready(self, pool: AsyncConnectionPool, looks: Looks, since: Callable[[], bool]) -> bool | None:
        """Before a claim of a queue believed to have backlog: True when there is something to
        claim, False when the source knows there is nothing (the queue ran dry), None when it does
        not know yet (look again at once). ``since()``: whether jobs were announced since this poll's
        look began (an announcement during a read may have come after its snapshot)."""
        ...

    def next_look(self, now: float) -> float | None:
        """Seconds until the source wants to look on its own (None: only when woken)."""
        ...

    def keepable(self, permits: list[Permit]) -> list[Permit]:
        """Of the freed permits the allocator lets the queue keep, those this source can hand over
        (none while it cannot plan a hand-over claim: ``hands_over``)."""
        ...

    def plan(self, permits: Sequence[Permit], deadline: float | None, seen: int) -> Claim | None:
        """The claim for up to these permits (its ``permits`` a prefix of them: the rest are not
        used), or None when there is nothing to claim with them."""
        ...

    async def run(self, pool: AsyncConnectionPool, claim: Claim, looks: Looks) -> list[ClaimedJob]:
        """Run the claim on a connection of its own (the runner's poll); the writer runs it in its
        pipeline instead."""
        ...

    def settle(self, claim: Claim, jobs: Sequence[ClaimedJob] | None) -> bool | None:
        """The claim came back with ``jobs`` (None: it never ran, or failed). Returns what it says
        of the queue's backlog: False, no due job left; True, more to claim; None, nothing new."""
        ...

    def attempt_permits(
        self, jobs: Sequence[ClaimedJob], permits: Sequence[Permit], claimable: Callable[[], None]
    ) -> Sequence[Permit]:
        """The permits the jobs' attempts hold (one each, in order); ``claimable`` is to be called
        when an attempt's end may have made something claimable that was not."""
        ...

    def key_freed(self, key: str) -> bool:
        """An attempt of a capped fair key ended in some worker: whether that let this source claim
        something its cap held back."""
        ...

    def configure(self, settings: QueueKeySettings) -> bool:
        """The queue's fair-key settings (re-read every reload tick). Returns whether something
        may be claimable now that was not (a key's cap or weight changed)."""
        ...


# A source hands its queue over to the source that replaces it (a plain queue found to share its
# slots by key): the runner claims through the new one from its next look on.
Replace = Callable[[ClaimSource], None]


async def run_statement(pool: AsyncConnectionPool, claim: Claim) -> list[ClaimedJob]:
    """Run a claim's one statement on a connection of its own."""
    async with pool.connection() as conn, conn.cursor(row_factory=claim.rows) as cur:
        await cur.execute(statements[claim.statement], claim.params)
        return await cur.fetchall()
