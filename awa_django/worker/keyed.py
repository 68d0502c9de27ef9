"""A queue's claims when its slots are shared by fair key: discovery, the keyed claim, caps.

A ``QueueRunner`` claims through ``KeyedClaims`` once its queue shares its slots by key: when its
settings give a key a cap or a weight of its own (``QueueKeySettings.keyed``), when its backlog
holds a job with a key other than the default one as it first claims (``find_keyed_backlog``, one
index descent, so a worker started on a keyed backlog is fair from its first grant), or when a
claim of the plain path returns a job with such a key. Until then the queue keeps claim_jobs
unchanged: one key has nothing to share.

**Discovery: which keys have due jobs, without scanning keys.** The allocator (``KeyShares``)
learns of a key's due jobs in two ways:

- *arrivals*: ``find_arrivals`` reads ``(id, priority, run_at, fair_key)`` of the jobs past the
  runner's lane cursors, which here are discovery cursors (they advance over what was read, not
  over what was claimed), so each job that becomes available is read once, in arrival order: cost
  proportional to arrivals, and cheap under an old snapshot for the lane cursors' own reason. A read
  runs when the runner was nudged (a NOTIFY, the backlog probe seeing jobs past the cursors);
- *the sweep*: ``find_due_keys`` lists the keys with a due job (and each one's first), one index
  descent per key, for what lies behind the discovery cursors (the backlog there when keyed
  claiming starts, promotions, retries, releases, aged priorities, late commits). It runs at once
  when keyed claiming starts (the cursors then jump to the lanes' ends, ``find_lane_ends``), then
  every ``SWEEP_EVERY`` seconds and at least ``SWEEP_COST_FACTOR`` times its own duration apart;
  a due sweep waits one claim when new jobs were just announced, so their pickup does not pay it.
  A key it finds that the allocator has no backlog for is offered with an unknown count
  (``UNKNOWN_BACKLOG``): a key's backlog is a hint, the claim that comes back short says it ran
  dry.

**The keyed claim.** ``KeyShares.pick(permits)`` grants slots key by key; ``claim_keyed_jobs`` takes,
per granted key, up to that many of its due jobs in (priority, run_at, id) order, from the key's
own cursor (the last job it claimed; none: the key's front), in one statement. A key whose claim
came back short ran dry (``returned``); its cursor stays (the ``KEY_CURSORS`` most recently used are
kept). A due job seen behind a key's cursor
(an arrival read, or the first due job of the key the sweep returns) moves the cursor back to it,
so nothing waits behind a key's cursor longer than a sweep interval, and a key's claims, like the
lanes', never walk the dead entries its claimed jobs left behind.
Each move of a key's cursor, and the first due job an arrival read or the sweep shows of a key,
also tells the allocator where the key's next job lies (``KeyShares.near``, ``offer(position=)``):
keys of one quantum go oldest next job first, so one claim's jobs lie together in the table.

**Caps, exact across every worker.** When a grant holds capped keys, the claim runs in one
transaction: ``lock_fair_keys`` takes each capped key's advisory lock (sorted: no deadlock), then
``count_running_keys`` reads their running rows in a new snapshot, and the claim takes at most
``cap - running`` of each. Claims of one capped key therefore run one at a time across the cluster,
each seeing every one before it. A key short because of its cap waits (``returned(dry=False)``) until
one of its attempts ends, in any worker: the writer that finalises an attempt of a capped key sends,
in the same transaction, a NOTIFY naming the queue and key (``notify_freed_keys``, delivered once the
end is committed), and every worker where the cap held the key back lets it be picked again
(``key_freed``), so it claims as soon as it has a free slot. An attempt of this queue ending here,
and the settings reload, unblock every key too: the backstop for an end no writer announced (a
rescue, a cancel, a lost LISTEN connection).

What this does not give is one view of a capped key across workers: each worker's ``KeyShares``
rotates by what it served itself. When a worker's attempt of a key whose cap binds ends and that
worker gives the slot to another key, the key waits for the next slot to free where it was held
back; over a run, a key whose cap binds gets its cap to within about one attempt per worker.

**The hand-over** (``hand_over_params``): the writer passes a finished keyed attempt's slot to what
``KeyShares`` grants, claimed by claim_keyed_jobs in the writer's round trip, for uncapped queues,
rate-limited ones included (the runner takes the tokens first). Not for a queue with caps: its
claim must take its keys' advisory locks before the statement that counts their running rows, in
one transaction, and the writer's pipeline is one transaction with the whole batch's writes, so
every completion in the batch, whatever its queue, would wait (holding its row locks) behind
another worker's key lock. The cap would stay exact, but one key's contention would delay every
queue's completions; a capped queue's claims stay in its runner instead.

Attempts claimed here hold a permit wrapped so that its release also tells the allocator the
attempt ended and how long it held its slot (``KeyShares.finished``).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import class_row, dict_row
from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Permit, held_before
from awa_django.concurrency.keyconfig import QueueKeySettings
from awa_django.concurrency.keys import KeyShares
from awa_django.context import ClaimedJob, ClaimRows
from awa_django.sql import FREED_KEYS_CHANNEL, statements
from awa_django.worker.claims import Claim, Looks
from awa_django.worker.lanes import LaneCursors

logger = logging.getLogger(__name__)

ARRIVALS_LIMIT = 1000  # rows one find_arrivals reads; a full read is followed by another
SWEEP_EVERY = 1.0  # seconds, at least ...
SWEEP_COST_FACTOR = 20.0  # ... and this many times the last sweep's duration apart
SWEEP_LIMIT = 100_000  # keys one sweep returns at most
UNKNOWN_BACKLOG = 1 << 30  # a key found by the sweep: it has due jobs, how many is not known
KEY_CURSORS = 10_000  # key cursors kept (most recently used); a key without one scans from its front

KeyCursor = tuple[int, datetime, int]  # (priority, run_at, id) of a key's last claimed job


class Arrival:
    """A find_arrivals row, as the lane cursors read it (id, priority, run_at) plus its key."""

    __slots__ = ("fair_key", "id", "priority", "run_at")

    def __init__(self, id: int, priority: int, run_at: datetime, fair_key: str) -> None:
        self.id, self.priority, self.run_at, self.fair_key = id, priority, run_at, fair_key


class KeyedClaims:
    """One queue's keyed claim state: the allocator among its keys, key cursors, discovery timing."""

    def __init__(self, queue: str, settings: QueueKeySettings, worker: str = "") -> None:
        self.queue = queue
        self.worker = worker  # host:pid, stored as the claimed rows' attempted_by
        self.settings = settings
        self.shares = KeyShares(
            default_weight=settings.default_weight,
            default_cap=settings.default_max_running,
            weights=settings.weights(),
            caps=settings.caps(),
        )
        self.cursors: OrderedDict[str, KeyCursor] = OrderedDict()
        self.blocked: set[str] = set()  # keys held back by a cap another worker holds
        self.arrivals_pending = True  # read arrivals before the next claim
        self.started = False  # the discovery cursors were moved to the lanes' ends, the first sweep ran
        self.next_sweep = 0.0  # time.monotonic() the next sweep is due
        self.sweep_deferred = False  # a due sweep waited for one claim (sweep_due)
        self.sweeps = 0
        self.claims = 0
        self.capped_claims = 0

    # --- settings ----------------------------------------------------------------------

    def configure(self, settings: QueueKeySettings) -> None:
        if settings != self.settings:
            self.settings = settings
            self.shares.configure(
                default_weight=settings.default_weight,
                default_cap=settings.default_max_running,
                weights=settings.weights(),
                caps=settings.caps(),
            )
        self.unblock()  # a cap another worker held may have been freed meanwhile

    def unblock(self) -> None:
        """Let the keys held back by a cap be picked again (their next claim counts again)."""
        if self.blocked:
            self.shares.unblock(self.blocked)
            self.blocked.clear()

    def key_freed(self, key: str) -> bool:
        """An attempt of ``key`` ended somewhere: if its cap held it back here, it may be picked
        again (its next claim counts again). Returns whether it was held back."""
        if key not in self.blocked:
            return False
        self.blocked.discard(key)
        self.shares.unblock([key])
        return True

    # --- discovery ---------------------------------------------------------------------

    def sweep_due(self, now: float) -> bool:
        """Whether to sweep before this claim. A due sweep waits one claim when new jobs were
        announced (a nudge): their pickup should not pay its round trip; the next look sweeps."""
        if now < self.next_sweep:
            return False
        if self.arrivals_pending and not self.sweep_deferred:
            self.sweep_deferred = True
            return False
        self.sweep_deferred = False
        return True

    def sweep_in(self, now: float) -> float:
        """Seconds until the next sweep is due (at least a millisecond)."""
        return max(self.next_sweep - now, 0.001)

    async def start(self, pool: AsyncConnectionPool, lanes: LaneCursors) -> None:
        """Keyed claiming begins: the discovery cursors move to the lanes' ends (what lies before
        them is found key by key), then the first sweep."""
        async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["find_lane_ends"], {"queue": self.queue})
            ends = await cursor.fetchall()
        for end in ends:
            lanes.move_to(int(end["priority"]), (end["run_at"], int(end["id"])))
        await self.sweep(pool)
        self.started = True

    async def sweep(self, pool: AsyncConnectionPool) -> int:
        """One find_due_keys: offer each due key the allocator has no backlog for, and move a key's
        cursor back to its first due job if that lies behind it. Returns how many keys were offered."""
        started = time.monotonic()
        async with pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(statements["find_due_keys"], {"queue": self.queue, "limit": SWEEP_LIMIT})
            firsts: list[tuple[str, int, datetime, int]] = await cursor.fetchall()
        self.sweeps += 1
        offered = self.sweep_pass(firsts)
        # The spacing counts the whole sweep, the pass over every key in this process as well as
        # the statement: at 10,000 keys the pass is tens of milliseconds of the claim loop's time.
        took = time.monotonic() - started
        self.next_sweep = started + max(SWEEP_EVERY, SWEEP_COST_FACTOR * took)
        if offered:
            logger.debug("key sweep queue=%s keys=%d offered=%d seconds=%.3f", self.queue, len(firsts), offered, took)
        return offered

    def sweep_pass(self, firsts: Iterable[tuple[str, int, datetime, int]]) -> int:
        """The sweep's pass over the keys it found, each ``(key, priority, run_at, id)`` of the
        key's first due job: offer each key the allocator has no backlog for, move a key's cursor
        back to its first due job. One step per key, on plain tuples. Returns the keys offered."""
        offered = 0
        shares = self.shares
        for key, priority, run_at, first_id in firsts:
            self._behind(key, (priority, run_at, first_id))
            if shares.backlog(key) == 0:
                shares.offer(key, UNKNOWN_BACKLOG, position=first_id)
                offered += 1
        return offered

    def arrivals_announced(self) -> None:
        """New jobs were announced (a NOTIFY, a nudge): read the arrivals before the next claim, and
        hand no slot over until then (runner.QueueRunner._plan_keyed_hand_over)."""
        self.arrivals_pending = True

    async def read_arrivals(self, pool: AsyncConnectionPool, lanes: LaneCursors) -> int:
        """One find_arrivals past the discovery cursors: each job read is offered to its key, and
        moves its key's cursor back if it lies behind it. Returns the rows read."""
        params: dict[str, Any] = {"queue": self.queue, "limit": ARRIVALS_LIMIT, **lanes.params()}
        try:
            async with pool.connection() as conn, conn.cursor(row_factory=class_row(Arrival)) as cursor:
                await cursor.execute(statements["find_arrivals"], params)
                rows = await cursor.fetchall()
        except BaseException:
            lanes.claim_failed(params)
            raise
        lanes.advance(rows, params)
        self.arrivals_pending = len(rows) >= ARRIVALS_LIMIT
        counts: dict[str, int] = {}
        firsts: dict[str, int] = {}
        for row in rows:
            key = row.fair_key
            if key in counts:
                counts[key] += 1
            else:
                counts[key] = 1
                firsts[key] = row.id
            self._behind(key, (row.priority, row.run_at, row.id))
        shares = self.shares
        for key, n in counts.items():
            shares.offer(key, n, position=firsts[key])
        return len(rows)

    def _behind(self, key: str, job: KeyCursor) -> None:
        """A due job of ``key`` seen at ``job`` (priority, run_at, id): if it lies behind the key's
        cursor, the key's next claim starts at it."""
        cursor_at = self.cursors.get(key)
        if cursor_at is not None and job <= cursor_at:
            self.cursors[key] = (job[0], job[1], job[2] - 1)
            self.shares.near(key, job[2])

    # --- the claim -------------------------------------------------------------------------

    def plan(self, slots: int, deadline: float | None) -> dict[str, Any] | None:
        """The grants for ``slots`` slots and claim_keyed_jobs' parameters for them (``awarded``:
        the grants), or None when no key is granted one. ``settle`` takes the claim's answer."""
        grants = self.shares.pick(slots)
        if not grants:
            return None
        params = self._claim_params(grants, None if deadline is None else timedelta(seconds=deadline))
        params["awarded"] = grants
        return params

    async def claim(self, pool: AsyncConnectionPool, slots: int, deadline: float | None) -> list[ClaimedJob]:
        """Plan, run and settle one claim of up to ``slots`` slots (what ``KeyedSource`` does
        through the runner's loop, in one call). Returns the claimed jobs."""
        params = self.plan(slots, deadline)
        if params is None:
            return []
        try:
            jobs = await self.run(pool, params, ClaimRows())
        except BaseException:
            self.settle(params, None)
            raise
        self.settle(params, jobs)
        return jobs

    def settle(self, params: dict[str, Any], jobs: Sequence[ClaimedJob] | None) -> None:
        """The claim planned with ``params`` returned ``jobs`` (None: it never ran, or failed, and
        every grant goes back)."""
        grants: dict[str, int] = params["awarded"]
        if jobs is None:
            for key, granted in grants.items():
                self.shares.returned(key, granted, 0, dry=False)
            self.shares.unblock(list(grants))
            return
        self._settle(grants, params.get("allowed", grants), jobs)

    async def run(self, pool: AsyncConnectionPool, params: dict[str, Any], rows: ClaimRows) -> list[ClaimedJob]:
        """Run the claim planned with ``params``: one statement, or, when its grants hold capped
        keys, in the transaction that takes their locks and counts their running rows first
        (``allowed``, kept in ``params``, is what the caps let it take)."""
        grants: dict[str, int] = params["awarded"]
        settings = self.settings
        capped = sorted(key for key in grants if settings.max_running(key) is not None)
        if not capped:
            async with pool.connection() as conn, conn.cursor(row_factory=rows) as cur:
                await cur.execute(statements["claim_keyed_jobs"], params)
                return await cur.fetchall()
        self.capped_claims += 1
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(statements["lock_fair_keys"], {"queue": self.queue, "keys": capped})
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(statements["count_running_keys"], {"queue": self.queue, "keys": capped})
                running = {row["fair_key"]: int(row["running_count"]) for row in await cursor.fetchall()}
            allowed = dict(grants)
            for key in capped:
                cap = settings.max_running(key)
                assert cap is not None
                allowed[key] = max(0, min(grants[key], cap - running.get(key, 0)))
            params["allowed"] = allowed
            wanted = {key: n for key, n in allowed.items() if n > 0}
            if not wanted:
                return []
            narrowed = {**params, "grants": claim_grants(wanted, self.cursors)}
            async with conn.cursor(row_factory=rows) as cur:
                await cur.execute(statements["claim_keyed_jobs"], narrowed)
                return await cur.fetchall()

    def _settle(self, grants: dict[str, int], allowed: dict[str, int], jobs: Sequence[ClaimedJob]) -> None:
        """A claim for ``grants`` (``allowed``: what the caps let it take) returned ``jobs``: move
        the key cursors, give back each key's unfilled grants (dry, or held back by its cap)."""
        self.claims += 1
        claimed: dict[str, int] = {}
        for job in jobs:
            claimed[job.fair_key] = claimed.get(job.fair_key, 0) + 1
            assert job.run_at is not None, "claim_keyed_jobs returns run_at"
            at: KeyCursor = (job.priority, job.run_at, job.id)
            current = self.cursors.get(job.fair_key)
            if current is None or at > current:
                self.cursors[job.fair_key] = at
                self.cursors.move_to_end(job.fair_key)
                self.shares.near(job.fair_key, job.id)  # its next job lies past this one
        while len(self.cursors) > KEY_CURSORS:
            self.cursors.popitem(last=False)
        for key, granted in grants.items():
            got = claimed.get(key, 0)
            if got == granted:
                continue
            dry = got < allowed.get(key, 0)  # short of what the cap allowed: no more due jobs
            if not dry:
                self.blocked.add(key)
            self.shares.returned(key, granted, got, dry=dry)

    def _claim_params(self, counts: dict[str, int], deadline: timedelta | None) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "grants": claim_grants(counts, self.cursors),
            "deadline": deadline,
            "worker": self.worker,
        }

    # --- attempts --------------------------------------------------------------------------

    def permits(self, jobs: Sequence[ClaimedJob], permits: Sequence[Permit], ended: Callable[[], None]) -> list[Permit]:
        """Each job's permit, as a ``KeyedPermit`` whose release also reports the attempt's end to
        the allocator (``finished``), then calls ``ended``. A ``KeyedPermit`` handed over (its
        previous attempt already reported) is bound to its new job."""
        now = time.monotonic()
        bound: list[Permit] = []
        for job, permit in zip(jobs, permits, strict=False):
            if isinstance(permit, KeyedPermit):
                permit.bind(job.fair_key, now)
                bound.append(permit)
            else:
                bound.append(KeyedPermit(permit, self, job.fair_key, now, ended))
        return bound

    def attempt_ended(self, key: str, seconds: float) -> None:
        self.shares.finished(key, seconds)


class KeyedSource:
    """The claim source of a queue sharing its slots by fair key (claims.py: ``ClaimSource``).

    Discovery before the claim (the first sweep when it starts, then the sweep when due, the
    arrivals when new jobs were announced), then grants by ``KeyShares`` and claim_keyed_jobs. Its
    lane cursors are discovery cursors: the look-behind leaves them alone (the sweep finds what lies
    behind), and the backlog probe's "nothing past the cursors" does not mean the queue ran dry."""

    rewinds_lanes = False
    probe_sees_all = False

    def __init__(self, queue: str, settings: QueueKeySettings, worker: str, lanes: LaneCursors) -> None:
        self.claims = KeyedClaims(queue, settings, worker)
        self.lanes = lanes

    def announced(self) -> None:
        self.claims.arrivals_announced()

    async def discover(self, pool: AsyncConnectionPool, looks: Looks) -> None:
        claims = self.claims
        if not claims.started:
            looks.look_began()
            await claims.start(pool, self.lanes)
            looks.found()
        elif claims.sweep_due(time.monotonic()):
            looks.look_began()
            if await claims.sweep(pool):
                looks.found()

    async def ready(self, pool: AsyncConnectionPool, looks: Looks, since: Callable[[], bool]) -> bool | None:
        claims = self.claims
        if claims.arrivals_pending:
            looks.look_began()
            await claims.read_arrivals(pool, self.lanes)
            if since():
                claims.arrivals_announced()  # during the read, perhaps after its snapshot: read again
        if claims.shares.has_eligible():
            return True
        return None if claims.arrivals_pending else False

    def next_look(self, now: float) -> float | None:
        return self.claims.sweep_in(now)

    @property
    def hands_over(self) -> bool:
        """Not for a queue with caps (a capped key's claim takes its lock and counts its running
        rows first, in the runner: module docstring, "The hand-over"), nor while arrivals are
        announced and not yet read: a newcomer key is unknown to ``KeyShares`` until then, and every
        slot handed over meanwhile would go to the keys it already knows (under load, a flood's key
        took dozens of starts ahead of a newcomer that way). The runner's own claim, after its
        read, takes the slots."""
        claims = self.claims
        return not claims.settings.capped and not claims.arrivals_pending

    def keepable(self, permits: list[Permit]) -> list[Permit]:
        """The freed permits of keyed attempts, while it hands over (``hands_over``)."""
        if not self.hands_over:
            return []
        return [permit for permit in permits if isinstance(permit, KeyedPermit)]

    def plan(self, permits: Sequence[Permit], deadline: float | None, seen: int) -> Claim | None:
        """The slots go to what ``KeyShares`` grants; the attempts of handed-over permits end now
        (their keys told first, so the grants count them)."""
        for permit in held_before(permits):  # the rest are new: none is a KeyedPermit
            if isinstance(permit, KeyedPermit):
                permit.hand_over()
        params = self.claims.plan(len(permits), deadline)
        if params is None:
            return None
        granted = sum(params["awarded"].values())
        return Claim(self, permits[:granted], "claim_keyed_jobs", params, seen)

    async def run(self, pool: AsyncConnectionPool, claim: Claim, looks: Looks) -> list[ClaimedJob]:
        # Not a look at the queue's due jobs: it claims only from the keys already known.
        return await self.claims.run(pool, claim.params, claim.rows)

    def settle(self, claim: Claim, jobs: Sequence[ClaimedJob] | None) -> bool | None:
        claims = self.claims
        claims.settle(claim.params, jobs)
        if claims.shares.has_eligible():
            return True
        if jobs is not None and len(jobs) < len(claim.permits) and not claims.arrivals_pending:
            return False
        return None

    def attempt_permits(
        self, jobs: Sequence[ClaimedJob], permits: Sequence[Permit], claimable: Callable[[], None]
    ) -> Sequence[Permit]:
        """Each a ``KeyedPermit``: its release reports the attempt's end to ``KeyShares``, lets the
        keys a cap held back go, and calls ``claimable`` if a key may take a slot now."""

        def ended() -> None:
            self.claims.unblock()
            if self.claims.shares.has_eligible():
                claimable()

        return self.claims.permits(jobs, permits, ended)

    def configure(self, settings: QueueKeySettings) -> bool:
        """New weights and caps; keys held back by a cap elsewhere are looked at again."""
        self.claims.configure(settings)
        return self.claims.shares.has_eligible()

    def key_freed(self, key: str) -> bool:
        return self.claims.key_freed(key)


class KeyedPermit(Permit):
    """A keyed attempt's permit: releasing it releases the slot and reports the attempt's end
    (its key, how long it held the slot). Handed over by the writer to the queue's next job, it
    reports the end at once (``hand_over``) and is bound to the new job (``bind``)."""

    def __init__(self, inner: Permit, claims: KeyedClaims, key: str, started: float, ended: Callable[[], None]) -> None:
        super().__init__(inner.queue, inner.kind, self._end)
        self._inner = inner
        self._claims = claims
        self._key: str | None = key
        self._started = started
        self._ended = ended

    @property
    def capped_key(self) -> str | None:
        """The key of the attempt this permit holds, if the key has a cap (its end is announced)."""
        key = self._key
        return key if key is not None and self._claims.settings.max_running(key) is not None else None

    def hand_over(self) -> None:
        """The attempt ended; the slot passes straight to a next job of the queue."""
        key, self._key = self._key, None
        if key is not None:
            self._claims.attempt_ended(key, time.monotonic() - self._started)

    def bind(self, key: str, started: float) -> None:
        self._key, self._started = key, started

    def _end(self) -> None:
        try:
            self._inner.release()
        finally:
            self.hand_over()
            self._ended()


def claim_grants(counts: Mapping[str, int], cursors: Mapping[str, KeyCursor]) -> str:
    """claim_keyed_jobs' ``grants``: per granted key, ``[key, count, priority, run_at, id]`` of
    where its scan starts (its cursor; nulls: its front), as one JSON text. ``run_at`` goes as epoch
    seconds (a float: a seventh of isoformat's cost), exact to the microsecond only within 2**33
    seconds of 1970 (1698 to 2242); outside, as its isoformat text (enqueue takes run_at from year
    1: a cursor rounded past its own run_at left every later job of its key behind it, unclaimed).
    The statement reads a number back with to_timestamp, a text as a timestamptz."""
    grants: list[list[Any]] = []
    for key, count in counts.items():
        at = cursors.get(key)
        if at is None:
            grants.append([key, count, None, None, None])
        else:
            seconds = at[1].timestamp()
            grants.append(
                [key, count, at[0], seconds if -_EXACT_SECONDS < seconds < _EXACT_SECONDS else at[1].isoformat(), at[2]]
            )
    return json.dumps(grants)


_EXACT_SECONDS = float(2**33)  # epoch seconds a float holds to the microsecond (its step stays under 1 µs)


async def has_keyed_backlog(pool: AsyncConnectionPool, queue: str) -> bool:
    """Whether ``queue`` has an available job on a key other than the default one (find_keyed_backlog)."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(statements["find_keyed_backlog"], {"queue": queue})
        row = await cursor.fetchone()
    return row is not None and bool(row["keyed"])


def first_key_other_than_default(jobs: Sequence[ClaimedJob]) -> str | None:
    """The first key other than the default one among claimed jobs (None: all on the default key)."""
    for job in jobs:
        if job.fair_key:
            return job.fair_key
    return None


def freed_keys(permits: Iterable[Permit]) -> dict[str, Any]:
    """notify_freed_keys' parameters: one (queue, key) per permit whose attempt is of a capped key
    (empty lists: none, and the writer sends nothing). Read before the permits are handed over."""
    queues: list[str] = []
    keys: list[str] = []
    for permit in permits:
        if isinstance(permit, KeyedPermit):
            key = permit.capped_key
            if key is not None:
                queues.append(permit.queue)
                keys.append(key)
    return {"channel": FREED_KEYS_CHANNEL, "queues": queues, "keys": keys}


def parse_freed(payload: str) -> tuple[str, str] | None:
    """A FREED_KEYS_CHANNEL payload as (queue, key); None for one that is not such a pair."""
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(part, str) for part in value):
        return value[0], value[1]
    return None
