"""A queue's belief that it may have due jobs: ``Backlog``, one state machine with named transitions.

A queue runner (worker/runner.py) asks for permits and issues a claim only while its queue is
believed to have backlog (``hungry``); an idle queue issues no query. The belief moves by these
transitions, and by no other write:

- ``announced``: new jobs may be due (a NOTIFY, the backlog probe's "ready", a settings change, a
  lane rewind, a claim that never ran). Each moves the announcement count (``generation``) on;
- ``found``: a look saw more to claim (a claim that filled its permits and left jobs, a key sweep,
  a key a cap held back freed): counted as an announcement, since a look begun before it may
  have begun before those jobs were committed;
- ``look_began``: a look at the queue's due jobs began (a claim of its own; keyed, an arrival read
  or a sweep); it answers every request to look made before it;
- ``looked_dry(seen)``: a look taken at announcement count ``seen`` found nothing left. Believed only
  if nothing was announced since: a look begun before a commit never settles a request made after
  it. A look other than the runner's own claim (a hand-over's, the probe's) is not believed while
  the runner's own poll is under way: that poll's claim decides;
- ``poll_began`` / ``poll_ended``: the runner's own poll;
- ``claim_out`` / ``claim_back``: a hand-over claim planned for the writer, and its answer;
- ``stood_down``: the queue cannot use a slot (paused): no belief, no debt;
- ``look_requested``: NOTIFYs may have been missed (the LISTEN connection came back). A queue whose
  own poll is under way then is *owed* a look (its claim may have begun before the jobs nobody
  announced were committed): the probe looks at it once the poll ends (``owes_look``), unless a
  look of its own began since;
- ``probe_seen`` / ``verdict``: the backlog probe's look: taken as of ``probe_seen``'s token, judged
  by ``verdict``. "Ready" wakes a queue that sleeps, or one with a hand-over claim out (that claim
  may have begun before the jobs were committed); "none" stands a queue down that believed it had
  backlog, if the probe sees everything it could claim (``sees_all``).

Pure: no I/O, no clock. Proven over any order of events by tests/worker/test_backlog.py.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class ProbeSeen(NamedTuple):
    """What the backlog probe's look is judged against: the announcement count and the requests to
    look made when it began."""

    generation: int
    requests: int


class Verdict(Enum):
    LOOK = "look"  # the queue was told of due jobs: wake it
    DRY = "dry"  # the queue believes it has none: stand it down


class Backlog:
    """One queue's belief that it may have due jobs; see the module docstring for its transitions."""

    __slots__ = ("_claims_out", "_generation", "_hungry", "_looks_begun", "_owed", "_polling", "_requests")

    def __init__(self) -> None:
        self._hungry = False
        self._generation = 0  # announcements so far
        self._polling = False
        self._looks_begun = 0
        self._claims_out = 0
        self._owed = False  # a look was requested while the own poll was under way, none begun since
        self._requests = 0  # requests to look so far

    # --- what it believes ----------------------------------------------------------------

    @property
    def hungry(self) -> bool:
        """The queue may have due jobs: its runner looks (asks for permits, claims)."""
        return self._hungry

    @property
    def generation(self) -> int:
        """The announcement count: a look records it when it begins (``looked_dry``'s ``seen``)."""
        return self._generation

    @property
    def polling(self) -> bool:
        return self._polling

    @property
    def looks_begun(self) -> int:
        return self._looks_begun

    @property
    def claims_out(self) -> int:
        return self._claims_out

    @property
    def owes_look(self) -> bool:
        """A requested look is owed and the poll it waited for has ended: the probe looks now."""
        return self._owed and not self._polling

    @property
    def owed(self) -> bool:
        return self._owed

    def announced_since(self, seen: int) -> bool:
        return self._generation != seen

    # --- transitions -------------------------------------------------------------------

    def announced(self) -> None:
        self._generation += 1
        self._hungry = True

    def found(self) -> None:
        """As ``announced``: evidence of due jobs, which a look begun before it cannot overrule (the
        look may have begun before they were committed)."""
        self.announced()

    def look_began(self) -> None:
        self._looks_begun += 1
        self._owed = False

    def looked_dry(self, seen: int, *, own: bool = False) -> bool:
        """A look taken at announcement count ``seen`` found no due job left. Returns whether the
        queue stands down (it believed it had backlog and now does not)."""
        if self._generation != seen or (self._polling and not own):
            return False
        self._hungry = False
        return True

    def poll_began(self) -> None:
        self._polling = True

    def poll_ended(self) -> None:
        self._polling = False

    def claim_out(self) -> None:
        self._claims_out += 1

    def claim_back(self) -> None:
        assert self._claims_out > 0, "a hand-over claim came back that was never out"
        self._claims_out -= 1

    def stood_down(self) -> None:
        self._hungry = False
        self._owed = False

    def look_requested(self) -> None:
        self._requests += 1
        if self._polling:
            self._owed = True

    def probe_seen(self, *, paused: bool) -> ProbeSeen | None:
        """The token the probe's look is judged against, or None when the probe should not look
        (paused, or the own poll under way: its claim looks at the database itself)."""
        if paused or self._polling:
            return None
        return ProbeSeen(self._generation, self._requests)

    def verdict(self, ready: bool, seen: ProbeSeen, *, sees_all: bool) -> Verdict | None:
        """The probe's answer, asked as of ``seen``: ``ready``, the queue has due jobs past its
        cursors. ``sees_all``: "none" means the queue has nothing it could claim (not so while its
        jobs hold permits, whose hand-over will tell, or when its source knows of jobs the probe does
        not see)."""
        if seen.requests == self._requests:
            self._owed = False  # this look began after every request to look
        if self._polling or self._generation != seen.generation:
            return None  # it looked, or was told of new jobs, after the query: it knows better
        if ready:
            if self._hungry and not self._claims_out:
                return None
            self.announced()
            return Verdict.LOOK
        if self._hungry and sees_all:
            self._hungry = False
            return Verdict.DRY
        return None
