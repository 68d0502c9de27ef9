"""One queue's runner: the whole claim life of its queue, and ``Runners``, the queues' runners together.

A ``QueueRunner`` owns its queue's permits-to-claim path end to end: the rate bucket, the lane
cursors, the claim, the writer's hand-over claim and its adoption, and the verdict of the
backlog probe. Every rule of that life is written once, in one method:

- ``_ran_dry``: the queue has no due job left: it stops asking for permits (stops contending)
  until a NOTIFY, the backlog probe or a settings change nudges it;
- ``_give_back``: permits a claim did not fill go back, and so do their rate tokens;
- ``plan_hand_over`` / ``adopt``: the permits of finished jobs the writer may pass straight to
  this queue's next jobs, and what becomes of them once that claim returned;
- ``found_behind``: a lane rewind (``lanes.LaneCursors``): the look-behind saw a due job behind
  a lane's cursor, so the next claim goes back for it;
- ``_poll_keyed``: once the queue shares its slots by fair key (its key settings give a key a cap
  or a weight of its own, its backlog has a key other than the default one when it first claims,
  or a claim returned a job with such a key), the
  claims go through ``keyed.KeyedClaims``: discovery of the keys with due jobs, the keyed claim,
  exact caps. Until then the claim is claim_jobs, unchanged.

Other modules ask a runner, through ``Runners`` (by queue name), and never write its state.

A runner asks for permits only while its queue is believed to have backlog (``hungry``) and has
rate tokens, so what the allocator records as demand means "could use a slot now". An idle runner
issues no query: it sleeps until a NOTIFY for its queue, the backlog probe (one query per poll
interval for every idle queue), a settings change, or a freed permit the allocator says it may take.

``poll_once`` follows the six phases of docs/design.md ("Claiming and dispatching"):

1. pre-acquire permits without blocking (hard slots; or local min_workers slots, then overflow);
2. apply the queue's rate limit by taking no more permits than it has tokens;
3. claim at most that many jobs from the database;
4. give back the permits the database did not fill (``_give_back``);
5. if the claim came back short, the queue ran dry (``_ran_dry``);
6. start each job with exactly one permit, released when its attempt ends, after its final
   state is written: a row marked running always holds a slot.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator, Permit, TokenBucket, release_all
from awa_django.concurrency.keyconfig import QueueKeySettings, settings_from_rows
from awa_django.context import ClaimedJob, ClaimRows
from awa_django.sql import statements
from awa_django.worker.completer import HandOverClaim
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff
from awa_django.worker.keyed import (
    KeyedClaims,
    KeyedPermit,
    first_key_other_than_default,
    has_keyed_backlog,
)
from awa_django.worker.lanes import Key, LaneCursors
from awa_django.worker.stop import Stop

logger = logging.getLogger(__name__)

# Starts a claimed job's attempt on its permit, with the queue's deadline (attempts.Attempts.start).
StartAttempt = Callable[[ClaimedJob, Permit, "float | None"], None]
Spawn = Callable[[str, Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class QueueRunner:
    """One queue's claim loop and the state it keeps; see the module docstring for its rules."""

    def __init__(self, runners: Runners, config: QueueConfig) -> None:
        self._runners = runners
        self._config = config
        self._bucket: TokenBucket | None = None
        self._wake = asyncio.Event()
        # True while the queue is believed to have backlog: after a claim that filled every permit,
        # a NOTIFY, the backlog probe (which runs first thing at start), or a settings change
        # (``nudge``). Only then does it ask for permits, so an empty queue never contends.
        self._hungry = False
        self._nudges = 0  # counts nudges, so a verdict taken before one does not overrule it
        self._polling = False
        # Looks at the queue's due jobs begun (claims; arrival reads and sweeps, keyed): a look begun
        # after a request to look now answers it (the backlog probe's owed looks, listener.py).
        self._looks_begun = 0
        self._claimed = 0
        # Where each priority lane's claim scan starts (worker/lanes.py: why, and the look-behind).
        self._lanes = LaneCursors()
        # The parameters of this queue's hand-over claims still out (the writer may have one in
        # each of its writes in flight), until each answers or is abandoned.
        self._hand_overs_out: list[dict[str, Any]] = []
        # The queue's fair-key settings (None until read, before its first claim), and its keyed
        # claims once it shares its slots by key (None: claim_jobs, as if keys did not exist).
        self._key_settings: QueueKeySettings | None = None
        self._keyed: KeyedClaims | None = None
        self._keys_looked = False  # whether the backlog was looked at for keys (before the first claim)
        self._configure(config)

    # --- what others may read ---------------------------------------------------------

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def config(self) -> QueueConfig:
        return self._config

    @property
    def hungry(self) -> bool:
        return self._hungry

    @property
    def polling(self) -> bool:
        """Its own poll is under way (the probe passes over it: the poll's claim looks itself)."""
        return self._polling

    @property
    def looks_begun(self) -> int:
        """How many looks at its queue's due jobs it has begun (claims; arrival reads and sweeps)."""
        return self._looks_begun

    @property
    def claiming(self) -> bool:
        """A claim of this queue is under way: its own poll, or a hand-over claim not yet answered."""
        return self._polling or bool(self._hand_overs_out)

    @property
    def claimed_total(self) -> int:
        """Jobs this runner has claimed, by its own claims and by hand-over."""
        return self._claimed

    @property
    def lane_cursors(self) -> list[Key | None]:
        """Every lane's cursor, lane 1 first (None: the lane's front)."""
        return self._lanes.cursors()

    @property
    def rewinds(self) -> int:
        return self._lanes.rewinds

    @property
    def keyed(self) -> KeyedClaims | None:
        """The keyed claims, once the queue shares its slots by fair key (None until then)."""
        return self._keyed

    @property
    def wanted(self) -> int:
        """How many permits to ask for: the most this queue could ever run at once here."""
        runners = self._runners
        if runners.capacity_scope == "cluster":  # the leader's cap decides how many it gets
            return max(self._config.max_workers, runners.global_max_workers or 0)
        if runners.allocator.global_max_workers is None:
            return self._config.max_workers
        return runners.allocator.global_max_workers

    # --- what others may ask -------------------------------------------------------------

    def nudge(self) -> None:
        """There may be jobs to claim (a NOTIFY, the backlog probe, a settings change): look."""
        self._nudges += 1
        self._hungry = True
        if self._keyed is not None:
            self._keyed.arrivals_announced()
        self._wake.set()

    def wake(self) -> None:
        """Look again now (a permit it may take came back, or the worker is stopping)."""
        self._wake.set()

    def apply(self, config: QueueConfig) -> None:
        """Take a new configuration of this queue (the allocator is reconfigured separately);
        it may have been unpaused, so look for jobs."""
        self._configure(config)
        self.nudge()

    def apply_keys(self, settings: QueueKeySettings) -> None:
        """Take the queue's fair-key settings (re-read on every reload tick): a cap or a key weight
        of its own starts keyed claiming; a keyed queue takes the new weights and caps, and its
        keys held back by a cap elsewhere are looked at again."""
        self._key_settings = settings
        keyed = self._keyed
        if keyed is None:
            if settings.keyed:
                self._become_keyed()
            return
        keyed.configure(settings)
        if keyed.shares.has_eligible() and not self._config.paused:
            self._hungry = True
            self._wake.set()

    def set_rate_share(self, rate: float) -> None:
        """Scope "cluster": this worker's part of the queue's rate limit, as the leader split it."""
        config = self._config
        if config.rate_limit is None or self._bucket is None:
            return
        share = max(rate, 0.01)  # a worker with no part gets no cap either; keep the bucket valid
        burst = max(1, math.ceil(config.rate_burst * share / config.rate_limit)) if config.rate_burst else 0
        if abs(self._bucket.max_rate - share) > 1e-9:
            self._bucket.reconfigure(share, burst, now=time.monotonic())

    def demand(self) -> int:
        """What it asks of the cluster: ``wanted`` while it has backlog and is not paused, else 0."""
        return self.wanted if self._hungry and not self._config.paused else 0

    def probe_seen(self) -> int | None:
        """The nudge count the backlog probe's verdict will be judged against, or None when the
        probe should not look at this queue (paused, or its own claim is under way)."""
        return None if self._config.paused or self._polling else self._nudges

    def backlog_verdict(self, ready: bool, seen: int) -> None:
        """The backlog probe's answer for this queue, asked when its nudge count was ``seen``:
        wake it if it has due jobs and sleeps, or if a hand-over claim of it is out (that claim may
        have begun before the jobs were committed); if it has none but believes it has, it ran dry
        (another worker took the jobs a NOTIFY announced), unless it holds permits (its jobs'
        hand-over will tell)."""
        if self._polling or self._nudges != seen:
            return  # it looked, or was told of new jobs, after the query: it knows better
        if ready:
            # Asleep: wake it. A hand-over claim out may have begun before these jobs were
            # committed: nudged, the queue does not take that claim's short answer for running dry.
            if not self._hungry or self._hand_overs_out:
                logger.debug("backlog probe wakes queue=%s", self.name)
                self.nudge()
        elif (
            self._hungry
            and self._keyed is None  # keyed: the probe sees only arrivals; the keyed claim decides
            and self._runners.allocator.serves(self.name)
            and not self._runners.allocator.in_flight(self.name)
        ):
            self._ran_dry(seen)

    def found_behind(self, priority: int, key: Key) -> None:
        """Lane rewind: the look-behind saw a due job behind this lane's cursor, so the next claim
        (its own or a hand-over) starts the lane just before it."""
        if self._lanes.found_behind(priority, key):
            self.nudge()

    def looking(self) -> list[tuple[int, Key]]:
        """(priority, cursor) of every lane with a cursor: what the look-behind asks about."""
        return self._lanes.looking()

    # --- the hand-over (the writer passes permits straight to the next jobs) ---------------

    def plan_hand_over(self, permits: list[Permit], now: float, *, releasing: bool = False) -> HandOverClaim | None:
        """Which of these freed permits this queue keeps for its next jobs (within the allocator's
        rules and its rate tokens), and the claim to fill them; None: they all go back.

        ``releasing``: a workflow step of this queue ends in the batch. Its release runs in the
        batch's transaction, before the claim, so a dependent it makes available here (a chain's
        next step) is claimed in the same round trip, not after the commit's NOTIFY and a claim of
        its own; if none was, the claim finds nothing and its permits go back. Only while nothing
        else of the queue runs (the chain's case): a queue draining a backlog keeps its own claims.
        The claim asks for the freed permits it keeps and for every other slot the queue may take
        now (``_top_up``): a fan-out's head frees one permit and releases thousands of steps."""
        if self._config.paused:
            return None
        if not self._hungry and not (releasing and self._runners.allocator.in_flight(self.name) <= len(permits)):
            return None  # an idle queue: nothing to claim
        if self._keyed is not None:
            return self._plan_keyed_hand_over(self._keyed, permits, now)
        kept = self._runners.allocator.keepable(self.name, permits)
        if self._bucket is not None and kept:
            kept = kept[: self._bucket.take(len(kept), now)]
        if not kept:
            return None
        kept += self._top_up(now)
        params = self._claim_params(len(kept))
        self._hand_overs_out.append(params)
        return HandOverClaim(kept, params)

    def plan_passed(self, now: float) -> HandOverClaim | None:
        """Slots another queue's finished jobs freed, passed to this queue in the writer's round
        trip (``Runners._pass_across``): the permits this runner's own next claim would take,
        taken here, before the claim, as it would take them, and the claim to fill them. None
        while it would not claim (paused, no backlog, keyed, or a claim of its own under way)."""
        if self._config.paused or not self._hungry or self._keyed is not None or self.claiming:
            return None
        permits = self._top_up(now)
        if not permits:
            return None
        params = self._claim_params(len(permits))
        self._hand_overs_out.append(params)
        return HandOverClaim(permits, params)

    def _top_up(self, now: float) -> list[Permit]:
        """Permits the queue may take now beyond the freed ones it keeps, for the same hand-over
        claim: what its runner's next claim would ask for, taken here before the claim as the
        runner would. Without it, a group of slots that once started apart (a fan-out released
        by one job's end: that one slot handed over, the other slots claimed by the runner
        after the NOTIFY) kept its own cycle of writes and claims for the whole drain, two round
        trips where one would do (bench/workflows.py's fan-out, batches of 49 and 1)."""
        wanted = self.wanted
        if self._bucket is not None:
            wanted = min(wanted, self._bucket.available(now))
        if wanted <= 0:
            return []
        extra = self._runners.allocator.try_acquire(self.name, wanted)
        if self._bucket is not None and extra:
            self._bucket.take(len(extra), now)
        return extra

    def _plan_keyed_hand_over(self, keyed: KeyedClaims, permits: list[Permit], now: float) -> HandOverClaim | None:
        """The keyed hand-over: the kept permits' attempts end now (their keys told), topped up as
        the plain hand-over is (``_top_up``), and the slots go to what ``KeyShares`` grants, within
        the queue's rate tokens, claimed by claim_keyed_jobs after the writes. None for a queue with
        caps (its claims take their keys' locks and count their running rows first, in the runner:
        keyed.py, "Caps"), and None while arrivals are announced and not yet read: a newcomer key is
        unknown to ``KeyShares`` until the runner reads them, and every slot handed over meanwhile
        would go to the keys it already knows (under load, a flood's key took dozens of starts ahead
        of a newcomer that way). The freed permits go back, and the runner's own claim, after its
        read, takes them."""
        if keyed.settings.capped or keyed.arrivals_pending:
            return None
        kept = [p for p in self._runners.allocator.keepable(self.name, permits) if isinstance(p, KeyedPermit)]
        if self._bucket is not None and kept:
            kept = kept[: self._bucket.take(len(kept), now)]
        if not kept:
            return None
        for permit in kept:
            permit.hand_over()
        extra = self._top_up(now)  # as in the plain hand-over: one claim for every slot it may take
        slots: list[Permit] = [*kept, *extra]
        params = keyed.hand_over_params(len(slots), self._config.deadline)
        granted = 0 if params is None else sum(params["awarded"].values())
        if self._bucket is not None and granted < len(slots):
            self._bucket.refund(len(slots) - granted)  # the permits no key was granted go back unused
        # The freed permits not used go back through the writer; the top-up's, from here.
        release_all(slots[max(granted, len(kept)) :])
        if params is None:
            return None
        params["nudges"] = self._nudges
        return HandOverClaim(slots[:granted], params, "claim_keyed_jobs")

    def adopt(self, jobs: list[ClaimedJob], claim: HandOverClaim, *, claim_ran: bool) -> None:
        """The hand-over claim returned ``jobs`` (``claim_ran`` False: it never ran, its batch was
        refused): start them on the claim's permits, give back the rest."""
        if claim.statement == "claim_keyed_jobs" and self._keyed is not None:
            self._adopt_keyed(self._keyed, jobs, claim, claim_ran=claim_ran)
            return
        params = self._answered(claim)
        if params is not None:
            if claim_ran:
                self._lanes.advance(jobs, params)
            else:
                self._lanes.claim_failed(params)
        self._start(jobs, claim.permits)
        self._keys_seen(jobs)
        unfilled = claim.permits[len(jobs) :]
        if not unfilled:
            if claim_ran and claim.rows.more is False:  # it filled them, and left no due job
                self._ran_dry(params["nudges"] if params is not None else self._nudges)
            return
        self._give_back(unfilled)
        if not claim_ran:
            self.nudge()  # the claim never ran: the queue may still have jobs, let it claim itself
        else:
            self._ran_dry(params["nudges"] if params is not None else self._nudges)

    def abandon(self, claim: HandOverClaim) -> None:
        """The write carrying this hand-over claim stopped before it answered (the worker
        stopping): its rewinds are pending again, a keyed claim's grants go back; the writer
        releases its permits."""
        if claim.statement == "claim_keyed_jobs":
            if self._keyed is not None:
                self._keyed.settle_hand_over(claim.params, [], claim_ran=False)
            return
        params = self._answered(claim)
        if params is not None:
            self._lanes.claim_failed(params)

    def _answered(self, claim: HandOverClaim) -> dict[str, Any] | None:
        """The claim's parameters, no longer out; None if it is not one of this runner's."""
        for index, params in enumerate(self._hand_overs_out):
            if params is claim.params:
                del self._hand_overs_out[index]
                return params
        return None

    def _adopt_keyed(
        self, keyed: KeyedClaims, jobs: list[ClaimedJob], claim: HandOverClaim, *, claim_ran: bool
    ) -> None:
        keyed.settle_hand_over(claim.params, jobs, claim_ran=claim_ran)
        self._start(jobs, claim.permits)
        unfilled = claim.permits[len(jobs) :]
        if unfilled:
            self._give_back(unfilled)
        if not claim_ran:
            self.nudge()
        elif keyed.shares.has_eligible():
            self._hungry = True
            self._wake.set()

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        backoff = Backoff()
        stop = self._runners.stop
        while not stop.stopping:
            self._wake.clear()
            timeout: float | None
            try:
                timeout = await self.poll_once()
                backoff.reset()
            except TRANSIENT_ERRORS as exc:
                delay = backoff.next()
                logger.warning("claim failed queue=%s retrying_in=%.2fs error=%r", self.name, delay, exc)
                timeout = delay
            if timeout == 0:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    async def poll_once(self) -> float | None:
        """One round of the six phases; returns how long to wait before the next: 0 = at once,
        None = until woken (by a NOTIFY, the backlog probe, or a permit it may now take)."""
        if not self._config.paused:
            # Before the first claim, and not part of it: while these read, the backlog probe may
            # look at the queue (its first look is how the runner learns of jobs waiting at start;
            # were this "polling", the probe would pass over the queue, and nothing would look
            # again for a poll interval: tests/worker/test_backlog_at_start.py).
            if self._key_settings is None:
                await self._load_key_settings()
            if not self._keys_looked:
                await self._look_for_keys()
        self._polling = True
        try:
            return await self._poll()
        finally:
            self._polling = False

    async def _poll(self) -> float | None:
        allocator = self._runners.allocator
        if self._config.paused:
            self._hungry = False
            self._stand_down()
            return None
        if self._keyed is not None:
            return await self._poll_keyed(self._keyed)
        if not self._hungry:
            return None
        # A queue without rate tokens cannot use a slot now: it does not contend meanwhile.
        now = time.monotonic()
        wanted = self.wanted
        if self._bucket is not None:
            tokens = self._bucket.available(now)
            if tokens == 0:
                self._stand_down()
                return max(self._bucket.seconds_until(1, now), 0.001)
            wanted = min(wanted, tokens)
        # 1. pre-acquire, never blocking; refused, the queue's demand is recorded and the
        #    allocator names it among the waiting when a permit it may take comes back.
        permits = allocator.try_acquire(self.name, wanted)
        if not permits:
            self._runners.refused(self.name)
            return None
        # 2. the rate limit: no more permits than tokens were asked for, so take them all.
        if self._bucket is not None:
            self._bucket.take(len(permits), now)
        # 3. claim at most that many rows.
        seen = self._nudges
        try:
            jobs, more = await self._claim(len(permits))
        except BaseException:
            self._give_back(permits)
            raise
        # 4. and 5. what the database did not fill goes back, and the queue ran dry; so it did
        #    when the claim filled every permit and said no due job was left past its rows.
        if len(jobs) < len(permits):
            self._give_back(permits[len(jobs) :])
            self._ran_dry(seen, own_claim=True)
        elif more is False:
            self._ran_dry(seen, own_claim=True)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "claimed queue=%s asked=%d claimed=%d ids=%s",
                self.name,
                len(permits),
                len(jobs),
                ",".join(str(job.id) for job in jobs[:20]),
            )
        # 6. start each job with exactly one permit.
        self._start(jobs, permits)
        self._keys_seen(jobs)
        return 0 if self._hungry else None

    async def _poll_keyed(self, keyed: KeyedClaims) -> float | None:
        """The six phases, for a queue sharing its slots by key (worker/keyed.py): discovery
        first (the sweep when due, arrivals when nudged), then permits, then the keyed claim of
        what ``KeyShares`` grants. Returns as ``poll_once``; an idle keyed queue still wakes for
        its next sweep."""
        pool = self._runners.pool
        if not keyed.started:
            self._looks_begun += 1
            await keyed.start(pool, self._lanes)
            self._hungry = True
        elif keyed.sweep_due(time.monotonic()):
            self._looks_begun += 1
            if await keyed.sweep(pool):
                self._hungry = True
        if not self._hungry:
            return keyed.sweep_in(time.monotonic())
        seen = self._nudges
        if keyed.arrivals_pending:
            self._looks_begun += 1
            await keyed.read_arrivals(pool, self._lanes)
            if self._nudges != seen:
                keyed.arrivals_announced()  # during the read, perhaps after its snapshot: read again
        if not keyed.shares.has_eligible():
            if not keyed.arrivals_pending:
                self._ran_dry(seen, own_claim=True)
            return 0 if self._hungry else keyed.sweep_in(time.monotonic())
        now = time.monotonic()
        wanted = self.wanted
        if self._bucket is not None:
            tokens = self._bucket.available(now)
            if tokens == 0:
                self._stand_down()
                return max(self._bucket.seconds_until(1, now), 0.001)
            wanted = min(wanted, tokens)
        permits = self._runners.allocator.try_acquire(self.name, wanted)
        if not permits:
            self._runners.refused(self.name)
            return keyed.sweep_in(now)  # a permit coming back wakes it sooner
        if self._bucket is not None:
            self._bucket.take(len(permits), now)
        try:
            jobs = await keyed.claim(pool, len(permits), self._config.deadline)
        except BaseException:
            self._give_back(permits)
            raise
        if len(jobs) < len(permits):
            self._give_back(permits[len(jobs) :])
            if not keyed.shares.has_eligible() and not keyed.arrivals_pending:
                self._ran_dry(seen, own_claim=True)
        self._start(jobs, permits)
        return 0 if self._hungry else keyed.sweep_in(time.monotonic())

    async def _load_key_settings(self) -> None:
        """Read this queue's fair-key settings before its first claim (a cap must hold from it)."""
        async with self._runners.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["read_key_settings"], {"queues": [self.name]})
            rows = await cursor.fetchall()
        if self._key_settings is None:  # a reload may have answered meanwhile
            self.apply_keys(settings_from_rows([self.name], rows)[self.name])

    async def _look_for_keys(self) -> None:
        """Before the queue's first claim: a backlog with a key other than the default one makes
        it share by key from that claim, not from the claim that would first return such a job."""
        self._keys_looked = True
        if self._keyed is None and await has_keyed_backlog(self._runners.pool, self.name):
            logger.info("queue has fair keys, sharing its slots by key queue=%s", self.name)
            self._become_keyed()

    def _keys_seen(self, jobs: Sequence[ClaimedJob]) -> None:
        """A plain claim returned a job with a key other than the default: share by key from now on."""
        if self._keyed is None and jobs and first_key_other_than_default(jobs) is not None:
            logger.info("queue has fair keys, sharing its slots by key queue=%s", self.name)
            self._become_keyed()

    def _become_keyed(self) -> None:
        self._keyed = KeyedClaims(self.name, self._key_settings or QueueKeySettings(), self._runners.worker)
        self.nudge()

    def key_freed(self, key: str) -> None:
        """An attempt of a capped key ended in some worker (FREED_KEYS_CHANNEL): if that key's cap
        held this queue's claims back, claim again."""
        keyed = self._keyed
        if keyed is not None and keyed.key_freed(key) and not self._config.paused:
            self._hungry = True
            self._wake.set()

    def _attempt_ended(self) -> None:
        """A keyed attempt ended here: keys held back by a cap may go now, and its key may be
        eligible again."""
        keyed = self._keyed
        if keyed is None:  # pragma: no cover - keyed claiming never stops
            return
        keyed.unblock()
        if keyed.shares.has_eligible() and not self._config.paused:
            self._hungry = True
            self._wake.set()

    async def _claim(self, limit: int) -> tuple[list[ClaimedJob], bool | None]:
        """Up to ``limit`` jobs, and whether a due job was left past them (``ClaimRows.more``)."""
        self._looks_begun += 1
        params = self._claim_params(limit)
        rows = ClaimRows()
        try:
            async with self._runners.pool.connection() as conn, conn.cursor(row_factory=rows) as cur:
                await cur.execute(statements["claim_jobs"], params)
                jobs = await cur.fetchall()
        except BaseException:
            self._lanes.claim_failed(params)
            raise
        self._lanes.advance(jobs, params)
        return jobs, rows.more

    # --- the rules, each written once -------------------------------------------------------

    def _ran_dry(self, seen: int, *, own_claim: bool = False) -> None:
        """The queue had no more due jobs, by a look taken when the nudge count was ``seen``: it
        stops contending, unless it was nudged since (new jobs may have come) or, for a look other
        than its own claim, its own claim is under way (that claim decides)."""
        if self._nudges != seen or (self._polling and not own_claim):
            return
        self._hungry = False
        self._stand_down()

    def _give_back(self, permits: Sequence[Permit]) -> None:
        """Permits no job of this queue will use: released (each release wakes only who may take
        it), and their rate tokens refunded, since no job was started with them."""
        release_all(permits)
        if self._bucket is not None and permits:
            self._bucket.refund(len(permits))

    def _stand_down(self) -> None:
        """This queue cannot use a slot now: clear its demand, and wake those who now can."""
        self._runners.allocator.clear_demand(self.name)
        self._runners.wake_waiting()

    def _start(self, jobs: Sequence[ClaimedJob], permits: Sequence[Permit]) -> None:
        self._claimed += len(jobs)
        if self._keyed is not None and jobs:
            permits = self._keyed.permits(jobs, permits, self._attempt_ended)
        start, deadline = self._runners.start_attempt, self._config.deadline
        for job, permit in zip(jobs, permits, strict=False):
            start(job, permit, deadline)

    def _claim_params(self, limit: int) -> dict[str, Any]:
        deadline = None if self._config.deadline is None else timedelta(seconds=self._config.deadline)
        return {
            "queue": self.name,
            "limit": limit,
            "deadline": deadline,
            "worker": self._runners.worker,
            "nudges": self._nudges,
            **self._lanes.params(),
        }

    def _configure(self, config: QueueConfig) -> None:
        self._config = config
        if config.rate_limit is None:
            self._bucket = None
        elif self._bucket is None:
            self._bucket = TokenBucket(config.rate_limit, config.rate_burst, queue=config.name)
        else:
            self._bucket.reconfigure(config.rate_limit, config.rate_burst, now=time.monotonic())


class Runners(Mapping[str, QueueRunner]):
    """This worker's queue runners by name, and what they share: the allocator, the pool, the stop.

    The other parts of the worker reach a queue through these methods, by name. It is also the
    writer's ``HandOver``: it splits the freed permits by queue and lets each runner decide.
    """

    def __init__(
        self, config: WorkerConfig, allocator: Allocator, pool: AsyncConnectionPool, stop: Stop, worker: str = ""
    ) -> None:
        self.allocator = allocator
        self.worker = worker  # host:pid, written to each claimed row's attempted_by
        self.pool = pool
        self.stop = stop
        self.capacity_scope = config.capacity_scope
        self.global_max_workers = config.global_max_workers
        self._runners: dict[str, QueueRunner] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._spawn: Spawn | None = None
        self._start_attempt: StartAttempt | None = None
        self._wake_scheduled = False
        allocator.on_release = self._on_release

    def open(self, loop: asyncio.AbstractEventLoop, spawn: Spawn, start_attempt: StartAttempt) -> None:
        """Bind to the running loop: where runner tasks are spawned and claimed jobs start."""
        self._loop, self._spawn, self._start_attempt = loop, spawn, start_attempt

    def start_attempt(self, job: ClaimedJob, permit: Permit, deadline: float | None) -> None:
        assert self._start_attempt is not None, "Runners.open() first"
        self._start_attempt(job, permit, deadline)

    # Mapping: read access for the supervisor's views and for tests.
    def __getitem__(self, name: str) -> QueueRunner:
        return self._runners[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runners)

    def __len__(self) -> int:
        return len(self._runners)

    def serve(self, config: QueueConfig) -> QueueRunner:
        """Start a runner for a queue not served before (its task is ``awa-runner-<queue>``)."""
        assert self._spawn is not None, "Runners.open() first"
        runner = QueueRunner(self, config)
        self._runners[config.name] = runner
        self._spawn(f"awa-runner-{config.name}", runner.run())
        return runner

    def apply(self, queues: Mapping[str, QueueConfig], *, serve_new: bool) -> None:
        """New queue settings (already accepted by the allocator): each runner takes its own; a
        queue without a runner gets one when ``serve_new``."""
        for name, queue in queues.items():
            runner = self._runners.get(name)
            if runner is not None:
                if runner.config != queue:
                    logger.info("queue settings changed queue=%s %s", name, queue)
                    runner.apply(queue)
            elif serve_new:
                logger.info("serving new queue queue=%s", name)
                self.serve(queue).nudge()
        self.wake_waiting()  # new weights or floors may let a waiting queue take a permit now

    def wake_all(self) -> None:
        for runner in self._runners.values():
            runner.wake()

    def nudge(self, queue: str) -> None:
        runner = self._runners.get(queue)
        if runner is not None:
            runner.nudge()

    def key_freed(self, queue: str, key: str) -> None:
        runner = self._runners.get(queue)
        if runner is not None:
            runner.key_freed(key)

    def deadline(self, queue: str) -> float | None:
        runner = self._runners.get(queue)
        return runner.config.deadline if runner is not None else None

    def paused(self, queue: str) -> bool:
        runner = self._runners.get(queue)
        return runner.config.paused if runner is not None else False

    def claiming(self, queue: str) -> bool:
        runner = self._runners.get(queue)
        return runner.claiming if runner is not None else False

    def polls_under_way(self) -> dict[str, int]:
        """{queue: ``looks_begun``} of the queues (not paused) whose own poll is under way."""
        return {
            name: runner.looks_begun
            for name, runner in self._runners.items()
            if runner.polling and not runner.config.paused
        }

    def poll_under_way(self, queue: str) -> bool:
        """Whether the queue's own poll is under way."""
        runner = self._runners.get(queue)
        return runner is not None and runner.polling

    def looks_begun(self, queue: str) -> int | None:
        """How many looks at its due jobs the queue has begun; None if it is paused or not served."""
        runner = self._runners.get(queue)
        return None if runner is None or runner.config.paused else runner.looks_begun

    def probe_candidates(self) -> dict[str, int]:
        """{queue: nudge count} of the queues the backlog probe should look at now."""
        seen = {name: runner.probe_seen() for name, runner in self._runners.items()}
        return {name: n for name, n in seen.items() if n is not None}

    def backlog_verdict(self, queue: str, ready: bool, seen: int) -> None:
        runner = self._runners.get(queue)
        if runner is not None:
            runner.backlog_verdict(ready, seen)

    def apply_keys(self, settings: Mapping[str, QueueKeySettings]) -> None:
        """Each served queue's fair-key settings, re-read on the reload tick."""
        for name, queue_settings in settings.items():
            runner = self._runners.get(name)
            if runner is not None:
                runner.apply_keys(queue_settings)

    def lane_cursors(self, queue: str) -> list[Key | None]:
        return self._runners[queue].lane_cursors

    def looking(self) -> list[tuple[str, int, Key]]:
        """(queue, priority, cursor) of every lane with a cursor, for the look-behind."""
        # Called 20 times a second by the window look: with 1,000 idle queues, a call per runner and
        # a list per lane set was 15 % of an idle worker's CPU, so the cursors are read here directly.
        return [
            (name, lane, key)
            for name, runner in self._runners.items()
            if runner._keyed is None  # keyed: its cursors are discovery cursors, swept instead
            for lane, key in enumerate(runner._lanes.live, 1)
            if key is not None
        ]

    def found_behind(self, queue: str, priority: int, key: tuple[datetime, int]) -> None:
        runner = self._runners.get(queue)
        if runner is not None:
            runner.found_behind(priority, key)

    def queue_use(self) -> dict[str, tuple[int, int]]:
        """{queue: (held, demand)} for capacity scope "cluster": demand only while the queue has
        backlog and is not paused."""
        allocator = self.allocator
        return {
            name: (allocator.in_flight(name), runner.demand())
            for name, runner in self._runners.items()
            if allocator.serves(name)
        }

    def apply_rate_shares(self, rates: Mapping[str, float]) -> None:
        for name, runner in self._runners.items():
            if name in rates:
                runner.set_rate_share(rates[name])

    def plan_hand_over(
        self, permits: Sequence[Permit], releasing: frozenset[str] = frozenset()
    ) -> dict[str, HandOverClaim]:
        """completer.HandOver: per queue, the freed permits its runner keeps for its next jobs."""
        if self.stop.stopping or not permits:
            return {}
        by_queue: dict[str, list[Permit]] = {}
        for permit in permits:
            by_queue.setdefault(permit.queue, []).append(permit)
        plan: dict[str, HandOverClaim] = {}
        now = time.monotonic()
        for queue, mine in by_queue.items():
            runner = self._runners.get(queue)
            claim = runner.plan_hand_over(mine, now, releasing=queue in releasing) if runner is not None else None
            if claim is not None:
                plan[queue] = claim
        if self.allocator.mode == "weighted":
            kept = {id(permit) for claim in plan.values() for permit in claim.permits}
            spare = [permit for permit in permits if id(permit) not in kept]
            if spare:
                self._pass_across(spare, plan, now)
        return plan

    def _pass_across(self, spare: list[Permit], plan: dict[str, HandOverClaim], now: float) -> None:
        """The hand-over across queues (weighted mode): the freed slots no queue of theirs keeps go
        to the queues a release would wake (``Allocator.to_wake``, most owed first), each taking
        what its own runner's next claim would take, claimed in the write's round trip. Without
        it, each such slot waited for the write's commit, its release, the woken runner's poll and
        its claim's own round trip: with 1,000 one-job queues sharing 50 slots, the weighted drain
        took 1.4x the hard-reserved one. The slots are lent (``Allocator.lending``) until the writes
        that end their jobs commit, so no more run at once than the global maximum allows; what no
        queue takes goes back after the commit, as before."""
        allocator = self.allocator
        with allocator.lending(spare):
            for queue in allocator.to_wake():
                if allocator.free == 0:
                    break
                runner = self._runners.get(queue)
                if runner is None or queue in plan:
                    continue
                claim = runner.plan_passed(now)
                if claim is not None:
                    plan[queue] = claim

    def adopt(self, queue: str, jobs: list[ClaimedJob], claim: HandOverClaim, *, claim_ran: bool) -> None:
        """completer.HandOver: the hand-over claim of ``queue`` came back."""
        runner = self._runners.get(queue)
        if runner is not None:
            runner.adopt(jobs, claim, claim_ran=claim_ran)
            return
        release_all(claim.permits[len(jobs) :])  # pragma: no cover - runners are never removed
        for job, permit in zip(jobs, claim.permits, strict=False):
            self.start_attempt(job, permit, None)

    def abandon(self, queue: str, claim: HandOverClaim) -> None:
        """completer.HandOver: the write carrying ``queue``'s hand-over claim stopped unanswered."""
        runner = self._runners.get(queue)
        if runner is not None:
            runner.abandon(claim)

    def wake_waiting(self) -> None:
        """Wake, soon, the runners the allocator says a free permit would now be granted to (once
        per loop turn, however many permits a batch gives back)."""
        if self._wake_scheduled:
            return
        if self._loop is None:
            self._wake_waiting_now()
            return
        self._wake_scheduled = True
        self._loop.call_soon_threadsafe(self._wake_waiting_now)

    def refused(self, queue: str) -> None:
        """``queue``'s runner asked for permits and got none. In weighted mode a release wakes
        only as many runners as permits are free (``Allocator.to_wake``); one of them refused
        while permits are still free (the ranking moved between its wake and its poll) passes the
        wake on to the next ones, so a free permit never waits for a sleeping queue it could serve."""
        if self.allocator.free > 0:
            self._wake(self.allocator.to_wake(skip=queue))

    def _on_release(self, queue: str) -> None:
        self.wake_waiting()

    def _wake_waiting_now(self) -> None:
        self._wake_scheduled = False
        self._wake(self.allocator.to_wake())

    def _wake(self, queues: list[str]) -> None:
        for queue in queues:
            runner = self._runners.get(queue)
            if runner is not None:
                runner.wake()
