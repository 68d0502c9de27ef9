"""One queue's runner: the whole claim life of its queue, and ``Runners``, the queues' runners together.

A ``QueueRunner`` owns its queue's permits-to-claim path end to end: the rate bucket, the claim
source, the writer's hand-over claim and its adoption, and the verdict of the backlog probe. It
claims through a ``ClaimSource`` (claims.py): ``PlainSource`` (claim_jobs over the lane cursors)
until the queue shares its slots by fair key, then ``KeyedSource``. The loop below is written once,
for every source; what a way of claiming needs of its own (discovery, grants, caps, cursors) is the
source's. Every rule of the loop is written once, in one method:

- ``_ran_dry``: the queue has no due job left: it stops asking for permits (stops contending)
  until a NOTIFY, the backlog probe or a settings change nudges it;
- ``_give_back``: permits a claim did not fill go back, and so do their rate tokens;
- ``_plan``: the claim for the permits taken, its own poll's and the hand-over's alike;
- ``_settled``: a claim came back (its own or a hand-over): the source settles it, its jobs start,
  what it did not fill goes back, and what it says of the backlog is believed;
- ``found_behind``: a lane rewind (``lanes.LaneCursors``): the look-behind saw a due job behind
  a lane's cursor, so the next claim goes back for it.

Other modules ask a runner, through ``Runners`` (by queue name), and never write its state.

A runner asks for permits only while its queue is believed to have backlog (``hungry``) and has
rate tokens, so what the allocator records as demand means "could use a slot now". An idle runner
issues no query: it sleeps until a NOTIFY for its queue, the backlog probe (one query per poll
interval for every idle queue), a settings change, or a freed permit the allocator says it may take.

``poll_once`` follows the six phases of docs/design.md ("Claiming and dispatching"):

1. pre-acquire permits without blocking (hard slots; or local min_workers slots, then overflow);
2. apply the queue's rate limit by taking no more permits than it has tokens;
3. claim at most that many jobs from the database (the source plans and runs the claim);
4. give back the permits the database did not fill (``_give_back``);
5. if the claim says so, the queue ran dry (``_ran_dry``);
6. start each job with exactly one permit, released when its attempt ends, after its final
   state is written: a row marked running always holds a slot.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa_django.concurrency import Allocator, Permit, Permits, TokenBucket, held_before, release_all
from awa_django.concurrency.keyconfig import QueueKeySettings, settings_from_rows
from awa_django.context import ClaimedJob
from awa_django.sql import statements
from awa_django.worker.attempts import Attempts
from awa_django.worker.backlog import Backlog, ProbeSeen, Verdict
from awa_django.worker.claims import Claim, ClaimSource
from awa_django.worker.config import QueueConfig, WorkerConfig
from awa_django.worker.db import TRANSIENT_ERRORS, Backoff
from awa_django.worker.keyed import KeyedClaims, KeyedSource
from awa_django.worker.lanes import Key
from awa_django.worker.plain import PlainSource
from awa_django.worker.stop import Stop

logger = logging.getLogger(__name__)

# Starts a runner's task, watched by the supervisor (supervisor.Worker._spawn).
Spawn = Callable[[str, Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class QueueRunner:
    """One queue's claim loop and the state it keeps; see the module docstring for its rules."""

    def __init__(self, runners: Runners, config: QueueConfig) -> None:
        self._runners = runners
        self._config = config
        self._bucket: TokenBucket | None = None
        self._wake = asyncio.Event()
        # Whether the queue may have due jobs (backlog.py): only then does it ask for permits, so
        # an empty queue never contends and an idle one issues no query.
        self._backlog = Backlog()
        self._claimed = 0
        # The queue's fair-key settings (None until read, before its first claim) and its source.
        self._key_settings: QueueKeySettings | None = None
        self._source: ClaimSource = PlainSource(
            config.name, runners.worker, self._replace, weighted=lambda: runners.allocator.mode == "weighted"
        )
        self._configure(config)

    # --- what others may read ---------------------------------------------------------

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def config(self) -> QueueConfig:
        return self._config

    @property
    def source(self) -> ClaimSource:
        return self._source

    @property
    def backlog(self) -> Backlog:
        return self._backlog

    @property
    def hungry(self) -> bool:
        return self._backlog.hungry

    @property
    def polling(self) -> bool:
        """Its own poll is under way (the probe passes over it: the poll's claim looks itself)."""
        return self._backlog.polling

    @property
    def claiming(self) -> bool:
        """A claim of this queue is under way: its own poll, or a hand-over claim not yet answered."""
        return self._backlog.polling or self._backlog.claims_out > 0

    @property
    def claimed_total(self) -> int:
        """Jobs this runner has claimed, by its own claims and by hand-over."""
        return self._claimed

    @property
    def lane_cursors(self) -> list[Key | None]:
        """Every lane's cursor, lane 1 first (None: the lane's front)."""
        return self._source.lanes.cursors()

    @property
    def rewinds(self) -> int:
        return self._source.lanes.rewinds

    @property
    def keyed(self) -> KeyedClaims | None:
        """The keyed claims, once the queue shares its slots by fair key (None until then)."""
        source = self._source
        return source.claims if isinstance(source, KeyedSource) else None

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
        self._backlog.announced()
        self._source.announced()
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
        if self._source.configure(settings):
            self._claimable()

    def key_freed(self, key: str) -> None:
        """An attempt of a capped key ended in some worker (FREED_KEYS_CHANNEL): if that key's cap
        held this queue's claims back, claim again."""
        if self._source.key_freed(key):
            self._claimable()

    def set_rate_share(self, rate: float) -> None:
        """Scope "cluster": this worker's part of the queue's rate limit, as the leader split it."""
        config = self._config
        if config.rate_limit is None or self._bucket is None:
            return
        now = time.monotonic()
        share = max(rate, 0.01)  # a bucket needs a rate: no part is 0.01/s, emptied at every plan
        # Its part of the burst in force (0: ceil(rate_limit)), never its own ceil of its share: the
        # leader gives the rate in whole parts of the burst, which add up to it (cluster.py).
        host_burst = config.rate_burst or math.ceil(config.rate_limit)
        burst = max(1, math.ceil(host_burst * share / config.rate_limit - 1e-9))
        if abs(self._bucket.max_rate - share) > 1e-9:
            self._bucket.reconfigure(share, burst, now=now)
            # A runner out of tokens sleeps until the old rate's next token: 100 s at the 0.01/s of
            # a bucket still waiting for its first part. The new rate may earn one sooner.
            self.wake()
        if rate <= 0:
            # No part (the others' cuts not yet read, or a burst smaller than the workers): no
            # token while the leader plans, not one every 100 s beside the parts that add up.
            self._bucket.take(self._bucket.available(now), now)

    def demand(self) -> int:
        """What it asks of the cluster: ``wanted`` while it has backlog, is not paused and has a rate
        token, else 0. Read at every instant, not only after a poll: a runner nudged while its bucket
        was empty asked for everything until its poll stood it down, and the leader's plan then gave
        that worker the queue's whole rate for a round (the next split it again)."""
        if not self._backlog.hungry or self._config.paused:
            return 0
        if self._bucket is not None and self._bucket.available(time.monotonic()) == 0:
            return 0
        return self.wanted

    def probe_seen(self) -> ProbeSeen | None:
        """What the backlog probe's verdict will be judged against, or None when the probe should
        not look at this queue (paused, or its own claim is under way)."""
        return self._backlog.probe_seen(paused=self._config.paused)

    def backlog_verdict(self, ready: bool, seen: ProbeSeen) -> None:
        """The backlog probe's answer for this queue, asked as of ``seen`` (``Backlog.verdict``):
        "none" stands it down only while no job of it holds a permit (their hand-over will tell)
        and its source sees no more than the probe does (keyed: jobs behind the discovery cursors;
        the keyed claim decides)."""
        allocator = self._runners.allocator
        sees_all = self._source.probe_sees_all and allocator.serves(self.name) and not allocator.in_flight(self.name)
        verdict = self._backlog.verdict(ready, seen, sees_all=sees_all)
        if verdict is Verdict.LOOK:
            logger.debug("backlog probe wakes queue=%s", self.name)
            self._source.announced()
            self._wake.set()
        elif verdict is Verdict.DRY:
            self._stand_down()

    def found_behind(self, priority: int, key: Key) -> None:
        """Lane rewind: the look-behind saw a due job behind this lane's cursor, so the next claim
        (its own or a hand-over) starts the lane just before it."""
        if self._source.lanes.found_behind(priority, key):
            self.nudge()

    def looking(self) -> list[tuple[int, Key]]:
        """(priority, cursor) of every lane with a cursor: what the look-behind asks about."""
        return self._source.lanes.looking()

    # --- the hand-over (the writer passes permits straight to the next jobs) ---------------

    def plan_hand_over(self, permits: list[Permit], now: float, *, releasing: bool = False) -> Claim | None:
        """Which of these freed permits this queue keeps for its next jobs (within the allocator's
        rules, its source's and its rate tokens), and the claim to fill them; None: they all go back.

        ``releasing``: a workflow step of this queue ends in the batch. Its release runs in the
        batch's transaction, before the claim, so a dependent it makes available here (a chain's
        next step) is claimed in the same round trip, not after the commit's NOTIFY and a claim of
        its own; if none was, the claim finds nothing and its permits go back. Only while nothing
        else of the queue runs (the chain's case): a queue draining a backlog keeps its own claims.
        The claim asks for the freed permits it keeps and for every other slot the queue may take
        now (``_top_up``): a fan-out's head frees one permit and releases thousands of steps."""
        if self._config.paused:
            return None
        if not self._backlog.hungry and not (
            releasing and self._runners.allocator.in_flight(self.name) <= len(permits)
        ):
            return None  # an idle queue: nothing to claim
        kept = self._source.keepable(self._runners.allocator.keepable(self.name, permits))
        if self._bucket is not None and kept:
            kept = kept[: self._bucket.take(len(kept), now)]
        if not kept:
            return None
        return self._plan_out(kept, self._top_up(now))

    def plan_passed(self, now: float) -> Claim | None:
        """Slots another queue's finished jobs freed, passed to this queue in the writer's round
        trip (``Runners._pass_across``): the permits this runner's own next claim would take,
        taken here, before the claim, as it would take them, and the claim to fill them. None
        while it would not claim (paused, no backlog, its source cannot hand over now, or a claim
        of its own under way)."""
        if self._config.paused or not self._backlog.hungry or self.claiming or not self._source.hands_over:
            return None
        permits = self._top_up(now)
        if not permits:
            return None
        return self._plan_out([], permits)

    def _top_up(self, now: float) -> Permits:
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
            return Permits()
        extra = self._runners.allocator.reserve(self.name, wanted)
        if self._bucket is not None and extra:
            self._bucket.take(len(extra), now)
        return extra

    def _plan_out(self, kept: list[Permit], extra: Permits) -> Claim | None:
        """The hand-over claim for the freed permits kept and the top-up's: what the source does not
        use goes back (the rate tokens of all of them; the top-up's permits from here, the freed
        ones through the writer, which still holds them)."""
        slots = extra.after(kept)
        claim = self._plan(slots)
        used = 0 if claim is None else len(claim.permits)
        if self._bucket is not None and used < len(slots):
            self._bucket.refund(len(slots) - used)
        release_all(slots[max(used, len(kept)) :])
        if claim is not None:
            self._backlog.claim_out()
        return claim

    def adopt(self, jobs: list[ClaimedJob], claim: Claim, *, claim_ran: bool) -> None:
        """The hand-over claim returned ``jobs`` (``claim_ran`` False: it never ran, its batch was
        refused): start them on the claim's permits, give back the rest."""
        self._backlog.claim_back()
        self._settled(claim, jobs if claim_ran else None)

    def abandon(self, claim: Claim) -> None:
        """The write carrying this hand-over claim stopped before it answered (the worker
        stopping): its source takes it back (rewinds pending again, grants returned); the writer
        releases its permits."""
        self._backlog.claim_back()
        claim.source.settle(claim, None)

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
            # Before the poll, and not part of it: while these read, the backlog probe may look at
            # the queue (its first look is how the runner learns of jobs waiting at start; were
            # this "polling", the probe would pass over the queue, and nothing would look again for
            # a poll interval: tests/worker/test_backlog_at_start.py).
            if self._key_settings is None:
                await self._load_key_settings()
            source = None
            while source is not self._source:  # a source may replace itself as it looks
                source = self._source
                await source.discover(self._runners.pool, self._backlog)
        self._backlog.poll_began()
        try:
            return await self._poll()
        finally:
            self._backlog.poll_ended()

    async def _poll(self) -> float | None:
        backlog, source = self._backlog, self._source
        if self._config.paused:
            backlog.stood_down()
            self._stand_down()
            return None
        if not backlog.hungry:
            return source.next_look(time.monotonic())
        seen = backlog.generation
        ready = await source.ready(self._runners.pool, backlog, lambda: backlog.announced_since(seen))
        if not ready:
            if ready is False:
                self._ran_dry(seen, own_claim=True)
            return 0 if backlog.hungry else source.next_look(time.monotonic())
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
        permits = self._runners.allocator.reserve(self.name, wanted)
        if not permits:
            self._runners.refused(self.name)
            return source.next_look(now)  # a permit coming back wakes it sooner
        # 2. the rate limit: no more permits than tokens were asked for, so take them all.
        if self._bucket is not None:
            self._bucket.take(len(permits), now)
        # 3. claim at most that many rows; what the source's plan does not use goes back at once.
        claim = self._plan(permits, seen)
        if claim is None:
            self._give_back(permits)
            return 0 if backlog.hungry else source.next_look(time.monotonic())
        self._give_back(permits[len(claim.permits) :])
        try:
            jobs = await source.run(self._runners.pool, claim, backlog)
        except BaseException:
            self._give_back(claim.permits)
            source.settle(claim, None)
            raise
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "claimed queue=%s asked=%d claimed=%d ids=%s",
                self.name,
                len(claim.permits),
                len(jobs),
                ",".join(str(job.id) for job in jobs[:20]),
            )
        # 4. to 6.
        self._settled(claim, jobs, own_claim=True)
        return 0 if backlog.hungry else self._source.next_look(time.monotonic())

    def _plan(self, permits: Sequence[Permit], seen: int | None = None) -> Claim | None:
        """The source's claim for these permits, as of the announcement count ``seen`` (default: now)."""
        generation = self._backlog.generation if seen is None else seen
        return self._source.plan(permits, self._config.deadline, generation)

    def _settled(self, claim: Claim, jobs: list[ClaimedJob] | None, *, own_claim: bool = False) -> None:
        """A claim came back with ``jobs`` (None: it never ran, its batch was refused): its source
        settles it; each job starts on one of its permits; the permits it did not fill go back; and
        what it says of the queue's backlog is believed (a claim that never ran says nothing: the
        queue may still have jobs, so it claims itself)."""
        says = claim.source.settle(claim, jobs)
        got = jobs or []
        self._start(got, claim)
        unfilled = claim.permits[len(got) :]
        if unfilled:
            self._give_back(unfilled)
        if jobs is None:
            self.nudge()
        elif says is False:
            self._ran_dry(claim.seen, own_claim=own_claim)
        elif says:
            self._claimable()

    async def _load_key_settings(self) -> None:
        """Read this queue's fair-key settings before its first claim (a cap must hold from it)."""
        async with self._runners.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["read_key_settings"], {"queues": [self.name]})
            rows = await cursor.fetchall()
        if self._key_settings is None:  # a reload may have answered meanwhile
            self.apply_keys(settings_from_rows([self.name], rows)[self.name])

    def _replace(self, source: ClaimSource) -> None:
        """Claim through ``source`` from now on (a plain queue found to share its slots by key)."""
        self._source = source
        self.nudge()

    def _claimable(self) -> None:
        """Something may be claimable now that was not: look, unless paused."""
        if not self._config.paused:
            self._backlog.found()
            self._wake.set()

    # --- the rules, each written once -------------------------------------------------------

    def _ran_dry(self, seen: int, *, own_claim: bool = False) -> None:
        """The queue had no more due jobs, by a look taken at announcement count ``seen``: it stops
        contending, if its backlog believes it (``Backlog.looked_dry``)."""
        if self._backlog.looked_dry(seen, own=own_claim):
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

    def _start(self, jobs: Sequence[ClaimedJob], claim: Claim) -> None:
        if not jobs:
            return
        self._claimed += len(jobs)
        permits = claim.source.attempt_permits(jobs, claim.permits, self._claimable)
        start, deadline = self._runners.attempts.start, self._config.deadline
        for job, permit in zip(jobs, permits, strict=False):
            start(job, permit, deadline)

    def _configure(self, config: QueueConfig) -> None:
        before, self._config = self._config, config  # __init__ sets _config first: before is config
        if config.rate_limit is None:
            self._bucket = None
            return
        now = time.monotonic()
        rate, burst = config.rate_limit, config.rate_burst
        if self._runners.capacity_scope == "cluster":
            # The rate is the cluster's; this worker's bucket holds the part the leader gave it
            # (set_rate_share, with the caps). A new rate, or a first one: no token until that
            # part arrives (a bucket of the whole rate, full, in every worker let N workers start
            # N times the burst at once). Another setting changed: the part in force stands (set
            # to the whole rate again, each worker ran at it until the leader's next plan).
            changed = before.rate_limit != config.rate_limit or before.rate_burst != config.rate_burst
            if self._bucket is not None and not changed:
                return
            rate, burst = 0.01, 1
        # Shaped before it is published: a reader in another thread (tests/worker/test_cluster_scope.py
        # watches both workers' buckets) never sees a new bucket of the whole rate, full.
        bucket = self._bucket or TokenBucket(rate, burst, queue=config.name)
        bucket.reconfigure(rate, burst, now=now)
        if self._runners.capacity_scope == "cluster":
            bucket.take(bucket.available(now), now)
        self._bucket = bucket


class Runners(Mapping[str, QueueRunner]):
    """This worker's queue runners by name, and what they share: the allocator, the pool, the stop,
    and the attempts (``Attempts.start``), where every job they claim starts.

    A mapping: the other parts of the worker reach a queue's runner by name (``runners.get(queue)``)
    and ask it. Beside that, it routes the writer's freed permits (``HandOver``): it splits them by
    queue, lets each runner decide, passes the spare ones across, and returns each claim's answer
    to its runner.
    """

    def __init__(
        self,
        config: WorkerConfig,
        allocator: Allocator,
        pool: AsyncConnectionPool,
        stop: Stop,
        *,
        attempts: Attempts,
        spawn: Spawn,
        worker: str = "",
    ) -> None:
        self.allocator = allocator
        self.attempts = attempts  # where a claimed job starts: Attempts.start, on its permit
        self._spawn = spawn  # how a runner's task is started (the supervisor's, which watches it)
        self.worker = worker  # host:pid, written to each claimed row's attempted_by
        self.pool = pool
        self.stop = stop
        self.capacity_scope = config.capacity_scope
        self.global_max_workers = config.global_max_workers
        self._runners: dict[str, QueueRunner] = {}
        self._wake_scheduled = False
        allocator.on_release = self._on_release

    # Mapping: read access for the supervisor's views and for tests.
    def __getitem__(self, name: str) -> QueueRunner:
        return self._runners[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runners)

    def __len__(self) -> int:
        return len(self._runners)

    def serve(self, config: QueueConfig) -> QueueRunner:
        """Start a runner for a queue not served before (its task is ``awa-runner-<queue>``)."""
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

    def probe_candidates(self) -> dict[str, ProbeSeen]:
        """{queue: what its verdict is judged against} of the queues the backlog probe should look at now."""
        seen = {name: runner.probe_seen() for name, runner in self._runners.items()}
        return {name: n for name, n in seen.items() if n is not None}

    def apply_keys(self, settings: Mapping[str, QueueKeySettings]) -> None:
        """Each served queue's fair-key settings, re-read on the reload tick."""
        for name, queue_settings in settings.items():
            runner = self._runners.get(name)
            if runner is not None:
                runner.apply_keys(queue_settings)

    def looking(self) -> list[tuple[str, int, Key]]:
        """(queue, priority, cursor) of every lane with a cursor, for the look-behind."""
        # Called 20 times a second by the window look: with 1,000 idle queues, a call per runner and
        # a list per lane set was 15 % of an idle worker's CPU, so the cursors are read here directly.
        return [
            (name, lane, key)
            for name, runner in self._runners.items()
            if runner._source.rewinds_lanes  # keyed: its cursors are discovery cursors, swept instead
            for lane, key in enumerate(runner._source.lanes.live, 1)
            if key is not None
        ]

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

    def plan_hand_over(self, permits: Sequence[Permit], releasing: frozenset[str] = frozenset()) -> dict[str, Claim]:
        """completer.HandOver: per queue, the freed permits its runner keeps for its next jobs."""
        if self.stop.stopping or not permits:
            return {}
        by_queue: dict[str, list[Permit]] = {}
        for permit in permits:
            by_queue.setdefault(permit.queue, []).append(permit)
        plan: dict[str, Claim] = {}
        now = time.monotonic()
        for queue, mine in by_queue.items():
            runner = self._runners.get(queue)
            claim = runner.plan_hand_over(mine, now, releasing=queue in releasing) if runner is not None else None
            if claim is not None:
                plan[queue] = claim
        if self.allocator.mode == "weighted":
            kept = {id(permit) for claim in plan.values() for permit in held_before(claim.permits)}
            spare = [permit for permit in permits if id(permit) not in kept]
            if spare:
                self._pass_across(spare, plan, now)
        return plan

    def _pass_across(self, spare: list[Permit], plan: dict[str, Claim], now: float) -> None:
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

    def adopt(self, queue: str, jobs: list[ClaimedJob], claim: Claim, *, claim_ran: bool) -> None:
        """completer.HandOver: the hand-over claim of ``queue`` came back."""
        runner = self._runners.get(queue)
        if runner is not None:
            runner.adopt(jobs, claim, claim_ran=claim_ran)
            return
        release_all(claim.permits[len(jobs) :])  # pragma: no cover - runners are never removed
        for job, permit in zip(jobs, claim.permits, strict=False):
            self.attempts.start(job, permit, None)

    def abandon(self, queue: str, claim: Claim) -> None:
        """completer.HandOver: the write carrying ``queue``'s hand-over claim stopped unanswered."""
        runner = self._runners.get(queue)
        if runner is not None:
            runner.abandon(claim)

    def wake_waiting(self) -> None:
        """Wake, soon, the runners the allocator says a free permit would now be granted to (once
        per loop turn, however many permits a batch gives back)."""
        if self._wake_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()  # permits are released on the worker's loop
        except RuntimeError:  # no loop runs (a hand-over planned by a test): wake them now
            self._wake_waiting_now()
            return
        self._wake_scheduled = True
        loop.call_soon(self._wake_waiting_now)

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
