"""``Backlog``, a queue's belief that it may have due jobs, over any order of events (no database).

The state machine below plays a queue's life against a model of its table: jobs committed (with or
without a NOTIFY), taken by another worker, the runner's own polls and the writer's hand-over
claims (each a look that sees the table as it was when the look began), the backlog probe (its
query and its verdict apart), requests to look now (the listener reconnected), pauses. After every
step it checks the three promises:

- a NOTIFY, a probe verdict or a claim's answer that may have left due jobs leads to a look within
  one cycle: until a look begun after it has ended, the queue believes it has backlog (``hungry``:
  its runner's next turn claims);
- a look begun before a commit never settles a request made after it (the case above, with the
  look's begin and end around the commit and its announcement);
- a queue with nothing due makes no query: one uninterrupted poll of an empty queue leaves it
  believing it has none, and a queue that believes it has none only looks again after an event;
- and the owed look: a request to look now while the queue's own poll is under way is paid by a
  probe query or a look of the queue's own begun after it (the poll's claim may have begun before
  the jobs nobody announced were committed).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from awa_django.worker.backlog import Backlog, ProbeSeen, Verdict


@dataclass
class Look:
    """A look under way: when it began (the model's clock), the announcement count then, and the
    due jobs it can see (committed before it began, and not taken since)."""

    began: int
    seen: int
    visible: int = -1  # -1: not run yet (a hand-over claim planned, its write not yet sent)
    own: bool = True


@dataclass
class Probe:
    began: int
    token: ProbeSeen
    ready: bool


class BacklogMachine(RuleBasedStateMachine):
    hand_overs = Bundle("hand_overs")
    probes = Bundle("probes")

    def __init__(self) -> None:
        super().__init__()
        self.backlog = Backlog()
        self.clock = 0
        self.due = 0  # committed, available jobs in the table
        self.notifies = 0  # NOTIFYs sent and not yet delivered
        self.paused = False
        self.poll: Look | None = None  # the runner's own poll's look
        # Obligations: the times of events after which a look must follow (see the module docstring).
        self.must_look: list[int] = []
        self.owed_probe: list[int] = []  # requests to look now, until a look begun after each
        self.latest_look = 0  # when the latest look to have ended began

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def looked(self, began: int) -> None:
        """A look that began at ``began`` ended: it answers every event before it."""
        self.must_look = [t for t in self.must_look if t >= began]
        self.latest_look = max(self.latest_look, began)

    def look_begins(self) -> int:
        """A look of the queue's own, or a probe query, begins: it pays every request to look made
        before it (the probe judges its answer; the queue's own look claims what it sees)."""
        now = self.tick()
        self.owed_probe = []
        return now

    def take(self, look: Look, permits: int) -> bool:
        """The claim takes what it can see, up to its permits; returns whether it says the queue ran
        dry (short, or nothing left past its rows in its snapshot)."""
        visible = min(look.visible, self.due)  # rows taken since it began are gone for it too
        taken = min(permits, visible)
        self.due -= taken
        return visible <= permits

    # --- the table ---------------------------------------------------------------------

    @rule(notify=st.booleans())
    def commit(self, notify: bool) -> None:
        self.tick()
        self.due += 1
        if notify:
            self.notifies += 1

    @precondition(lambda self: self.due > 0)
    @rule()
    def another_worker_takes_one(self) -> None:
        self.tick()
        self.due -= 1

    @precondition(lambda self: self.notifies > 0)
    @rule()
    def notify_arrives(self) -> None:
        self.notifies -= 1
        self.backlog.announced()
        self.must_look.append(self.tick())

    # --- the runner's own poll -----------------------------------------------------------

    @precondition(lambda self: self.poll is None and not self.paused)
    @rule()
    def poll_begins(self) -> None:
        self.backlog.poll_began()
        if self.backlog.hungry:
            self.backlog.look_began()
            self.poll = Look(self.look_begins(), self.backlog.generation, self.due)
        else:
            self.backlog.poll_ended()  # idle: no query

    @precondition(lambda self: self.poll is not None)
    @rule(permits=st.integers(1, 3))
    def poll_ends(self, permits: int) -> None:
        look = self.poll
        assert look is not None
        if self.take(look, permits):
            self.backlog.looked_dry(look.seen, own=True)
        else:
            self.backlog.found()
            self.must_look.append(self.tick())
        self.looked(look.began)
        self.poll = None
        self.backlog.poll_ended()
        if self.paused:  # paused during the poll: the next one stands it down
            self.backlog.stood_down()
            self.must_look, self.owed_probe = [], []

    @precondition(lambda self: self.poll is None and not self.paused and self.notifies == 0)
    @rule()
    def one_cycle_of_an_empty_queue_makes_no_more_queries(self) -> None:
        """The table has nothing due and nothing is on its way: one poll that runs without
        interruption leaves the queue idle, so its next turns issue no query."""
        if self.due or self.backlog.claims_out:
            return
        self.poll_begins()
        if self.poll is not None:
            self.poll_ends(1)
        assert not self.backlog.hungry

    # --- the writer's hand-over claims ---------------------------------------------------

    @precondition(lambda self: not self.paused)
    @rule(target=hand_overs)
    def hand_over_planned(self) -> Look | None:
        if not self.backlog.hungry:
            return None
        self.backlog.claim_out()
        return Look(self.clock, self.backlog.generation, own=False)

    @rule(look=hand_overs)
    def hand_over_runs(self, look: Look | None) -> None:
        if look is not None and look.visible < 0:
            look.began, look.visible = self.tick(), self.due

    @rule(look=consumes(hand_overs), permits=st.integers(1, 3))
    def hand_over_answers(self, look: Look | None, permits: int) -> None:
        if look is None:
            return
        self.backlog.claim_back()
        if look.visible < 0:  # its batch was refused: it never ran; the queue may still have jobs
            self.backlog.announced()
            self.must_look.append(self.tick())
            return
        if self.take(look, permits):
            self.backlog.looked_dry(look.seen, own=False)
        else:
            self.backlog.found()
            self.must_look.append(self.tick())
        self.looked(look.began)

    # --- the backlog probe, and requests to look now ---------------------------------------

    @precondition(lambda self: not self.paused)
    @rule(target=probes)
    def probe_queries(self) -> Probe | None:
        token = self.backlog.probe_seen(paused=self.paused)
        if token is None:
            return None
        return Probe(self.look_begins(), token, self.due > 0)

    @rule(probe=consumes(probes), sees_all=st.booleans())
    def probe_judges(self, probe: Probe | None, sees_all: bool) -> None:
        if probe is None:
            return
        unanswered = probe.began > self.latest_look  # no look begun after its query has ended
        verdict = self.backlog.verdict(probe.ready, probe.token, sees_all=sees_all)
        if verdict is Verdict.DRY:
            assert not probe.ready
        self.looked(probe.began)
        if probe.ready and unanswered:  # it saw due jobs: a look begun after its query must follow
            self.must_look.append(probe.began)

    @rule()
    def look_requested(self) -> None:
        self.backlog.look_requested()
        if not self.paused:
            self.owed_probe.append(self.tick())

    # --- settings ------------------------------------------------------------------------

    @precondition(lambda self: not self.paused)
    @rule()
    def pause(self) -> None:
        self.paused = True
        if self.poll is None:  # the next poll sees it; one under way ends first
            self.backlog.stood_down()
            self.must_look, self.owed_probe = [], []

    @precondition(lambda self: self.paused and self.poll is None)
    @rule()
    def unpause(self) -> None:
        self.paused = False
        self.backlog.announced()
        self.must_look.append(self.tick())

    # --- the promises ---------------------------------------------------------------------

    @invariant()
    def a_look_follows_every_event_that_may_have_left_due_jobs(self) -> None:
        if self.must_look and not self.paused:
            assert self.backlog.hungry, (self.must_look, self.clock)

    @invariant()
    def a_request_during_a_poll_is_owed_until_a_look_after_it(self) -> None:
        if self.owed_probe and not self.paused:
            # The probe's next pass looks at the queue if it is not in its own poll; if it is, the
            # queue is owed a look once that poll ends.
            assert self.backlog.probe_seen(paused=False) is not None or self.backlog.owed
            if not self.backlog.polling:
                assert self.backlog.probe_seen(paused=False) is not None

    @invariant()
    def the_counts_hold(self) -> None:
        assert self.backlog.claims_out >= 0
        assert self.backlog.polling == (self.poll is not None)


BacklogMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_backlog__over_any_order_of_events = BacklogMachine.TestCase


def test_look_dry__begun_before_an_announcement__does_not_settle_it() -> None:
    backlog = Backlog()
    backlog.announced()
    seen = backlog.generation
    backlog.look_began()  # the claim begins: the table is empty
    backlog.announced()  # a job is committed and its NOTIFY arrives
    assert not backlog.looked_dry(seen, own=True)
    assert backlog.hungry


def test_found__after_a_look_began__that_look_does_not_settle_it() -> None:
    """A hand-over claim found more while the runner's own claim, begun before those jobs were
    committed, was out: that claim's dry answer must not stand the queue down."""
    backlog = Backlog()
    backlog.announced()
    backlog.poll_began()
    seen = backlog.generation
    backlog.look_began()
    backlog.found()
    assert not backlog.looked_dry(seen, own=True)
    assert backlog.hungry


def test_verdict__ready_while_a_hand_over_is_out__announces() -> None:
    """The hand-over claim may have begun before the jobs the probe saw were committed."""
    backlog = Backlog()
    backlog.announced()
    backlog.claim_out()
    seen = backlog.probe_seen(paused=False)
    assert seen is not None
    assert backlog.verdict(True, seen, sees_all=True) is Verdict.LOOK
    backlog.claim_back()
    assert not backlog.looked_dry(seen.generation)  # its short answer does not stand the queue down
    assert backlog.hungry


def test_owed__a_request_during_a_poll_is_paid_by_a_look_after_it() -> None:
    backlog = Backlog()
    backlog.poll_began()
    backlog.look_requested()
    assert backlog.owed and not backlog.owes_look
    backlog.poll_ended()
    assert backlog.owes_look
    backlog.poll_began()
    backlog.look_began()
    assert not backlog.owed


def test_owed__a_probe_query_begun_before_the_request_does_not_pay_it() -> None:
    backlog = Backlog()
    seen = backlog.probe_seen(paused=False)
    assert seen is not None
    backlog.poll_began()
    backlog.look_requested()
    backlog.poll_ended()
    backlog.verdict(False, seen, sees_all=True)
    assert backlog.owes_look
