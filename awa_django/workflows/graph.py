"""A workflow as it is declared: steps, their upstream edges, and the canvas shorthands.

Pure: no I/O, no Django model. ``Workflow`` (``awa_django.workflows.declare``) collects ``Step``s;
``chain``, ``group`` and ``chord`` build a ``Canvas`` that ``Workflow.extend`` places; ``order``
sorts the steps so every upstream comes before its dependents, or raises ``InvalidJobError``
naming a cycle.

Edge policies:

- ``on_success`` (the default): the dependent runs once the upstream completed; an upstream that
  failed or was cancelled cancels the dependent, with an error naming the upstream.
- ``always``: the dependent runs once the upstream ended, however it ended (a "finally" step).
- ``on_discard`` (``Batch(on_discard=...)``): the dependent runs as soon as one of its upstream
  steps failed or was cancelled, and is cancelled once all of them completed. A step's edges are
  then all ``on_discard``, all from steps of its own workflow.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any, Literal

from awa_django.exceptions import InvalidJobError

Policy = Literal["on_success", "always", "on_discard"]
POLICIES: dict[str, int] = {"on_success": 0, "always": 1, "on_discard": 2}  # as stored in awa_job_edge.policy


@dataclass(eq=False, slots=True)
class Step:
    """One job of a workflow, declared but perhaps not yet written (``id`` is set by enqueue; before
    that, reading it raises InvalidJobError)."""

    workflow: object  # the Workflow it belongs to (identity only: graph.py knows no Workflow)
    index: int
    kind: str
    args: Mapping[str, Any] | None
    name: str
    options: dict[str, Any]
    # Its upstream edges (a tuple; a list of its own once ``after`` added some): an ``Upstream``,
    # or the upstream ``Step`` itself for a plain edge
    # (``on_success``, read by the step's name: a Step reads as that edge, see ``source`` and
    # ``policy``). No object per plain edge, and steps added after the same single upstream share
    # one tuple (Workflow.add): a 10,000-step fan-out is 10,000 objects for the garbage collector
    # to walk, not 40,000.
    upstreams: Sequence[Step | Upstream] = ()
    # Existing waiting jobs that wait for this step too (a dynamic fan-out's); a shared empty tuple
    # for every other step.
    before: Sequence[int] = ()
    job_id: int | None = None  # the job's id once the workflow is enqueued

    @property
    def source(self) -> Step:
        """As an edge (an item of a dependent's ``upstreams``): the upstream is this step."""
        return self

    @property
    def policy(self) -> Policy:
        """As an edge: a plain one, ``on_success``."""
        return "on_success"

    @property
    def id(self) -> int:
        """The step's job id; InvalidJobError before its workflow is enqueued."""
        if self.job_id is None:
            raise InvalidJobError("step", self.name, "has no job id until its workflow is enqueued (wf.enqueue())")
        return self.job_id

    @id.setter
    def id(self, value: int) -> None:
        self.job_id = value

    def after(self, *upstreams: Step | Upstream | int) -> Step:
        """Add upstream edges to this step (``Workflow.add``'s ``after``); returns the step."""
        edges = [upstream(item) for item in upstreams]
        if type(self.upstreams) is list:
            self.upstreams.extend(edges)  # its own list already: calls in a loop stay linear
        else:  # a tuple, perhaps shared with other steps of a fan-out: never changed in place
            self.upstreams = [*self.upstreams, *edges]
        return self

    def __repr__(self) -> str:
        return f"Step({self.name!r}, kind={self.kind!r}, id={self.job_id})"


@dataclass(frozen=True, slots=True)
class Upstream:
    """An edge's upstream end: a step of the same workflow, or an existing job by id."""

    source: Step | int
    policy: Policy = "on_success"
    name: str | None = None  # how the dependent reads its result; the step's name by default


def upstream(item: object, policy: Policy = "on_success") -> Upstream:
    """``item`` (a Step, an Upstream, a job id or a Job) as an Upstream; InvalidJobError otherwise."""
    if isinstance(item, Upstream):
        return item
    if isinstance(item, Step):
        return Upstream(item, policy)
    if isinstance(item, int) and not isinstance(item, bool):
        if not 0 < item < 2**63:  # a job id is a positive bigint
            raise InvalidJobError("after", item, "is not a job id: ids are positive integers below 2**63")
        return Upstream(item, policy)
    job_id = getattr(item, "pk", None)
    if isinstance(job_id, int) and type(item).__name__ == "Job":
        return Upstream(job_id, policy)
    raise InvalidJobError(
        "after", item, "must be a Step of this workflow, a job id, a Job, or always(...) of one of those"
    )


def always(item: Step | Upstream | int | object, *, name: str | None = None) -> Upstream:
    """An edge that runs its dependent however ``item`` ends (a "finally" step)."""
    base = upstream(item)
    return Upstream(base.source, "always", name if name is not None else base.name)


# --- canvas: Celery-style shorthands, placed into a Workflow -----------------------------------


@dataclass(frozen=True)
class StepSpec:
    """``step(kind, args, ...)``: a step not yet in any workflow."""

    kind: str
    args: Mapping[str, Any] | None = None
    name: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def place(self, workflow: Any, after: Sequence[Upstream]) -> list[Step]:
        return [workflow.add(self.kind, self.args, after=list(after), name=self.name, **self.options)]


@dataclass(frozen=True)
class Chain:
    """Each item after the previous one's tails (all of them, for a group)."""

    items: tuple[Canvas, ...]

    def place(self, workflow: Any, after: Sequence[Upstream]) -> list[Step]:
        tails: list[Step | Upstream] = list(after)
        for item in self.items:
            tails = list(item.place(workflow, [upstream(t) for t in tails]))
        return [t for t in tails if isinstance(t, Step)]


@dataclass(frozen=True)
class Group:
    """Items side by side, each after the same upstreams; its tails are all of theirs."""

    items: tuple[Canvas, ...]

    def place(self, workflow: Any, after: Sequence[Upstream]) -> list[Step]:
        tails: list[Step] = []
        for item in self.items:
            tails.extend(item.place(workflow, after))
        return tails


@dataclass(frozen=True)
class Chord:
    """``body`` once every tail of ``header`` has ended (``policy`` on each of those edges)."""

    header: Canvas
    body: Canvas
    policy: Policy = "on_success"

    def place(self, workflow: Any, after: Sequence[Upstream]) -> list[Step]:
        tails = self.header.place(workflow, after)
        return self.body.place(workflow, [Upstream(t, self.policy) for t in tails])


Canvas = StepSpec | Chain | Group | Chord


def step(
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    fair_key: str | None = None,
) -> StepSpec:
    """A step for ``chain`` / ``group`` / ``chord``, with ``enqueue``'s options."""
    options = given_options(
        queue=queue, priority=priority, run_at=run_at, max_attempts=max_attempts, metadata=metadata, tags=tags,
        fair_key=fair_key,
    )  # fmt: skip
    return StepSpec(kind, args, name, options)


def given_options(**options: Any) -> dict[str, Any]:
    """The enqueue options a step was given (None: not given, the kind's or the package's default)."""
    return {key: value for key, value in options.items() if value is not None}


def _canvas(items: Iterable[object], what: str) -> tuple[Canvas, ...]:
    found = tuple(items)
    for item in found:
        if not isinstance(item, StepSpec | Chain | Group | Chord):
            raise InvalidJobError(what, item, "takes step(...), chain(...), group(...) or chord(...) items")
    return found  # type: ignore[return-value]


def chain(*items: Canvas) -> Chain:
    """Run ``items`` one after another; a failure cancels the rest (Celery's ``chain``)."""
    return Chain(_canvas(items, "chain"))


def group(*items: Canvas) -> Group:
    """Run ``items`` side by side (Celery's ``group``)."""
    return Group(_canvas(items, "group"))


def chord(header: Canvas, body: Canvas, *, policy: Policy = "on_success") -> Chord:
    """Run ``body`` once all of ``header`` has ended: with ``on_success`` (Celery's ``chord``) only
    if all of it completed, else ``body`` is cancelled; with ``always`` however it ended."""
    _canvas((header, body), "chord")
    if policy not in POLICIES:
        raise InvalidJobError("policy", policy, f"must be one of {sorted(POLICIES)}")
    return Chord(header, body, policy)


# --- validation -------------------------------------------------------------------------------


def order(steps: Sequence[Step]) -> list[Step]:
    """The steps with every upstream step before its dependents (stable: declaration order where
    the edges allow); InvalidJobError naming the steps of a cycle."""
    # The usual declaration, every upstream added before its dependents, is already that order (the
    # smallest index first at each point: no other topological order comes before it).
    if all(a.index < b.index for a, b in pairwise(steps)) and _upstreams_first(steps):
        return list(steps)
    dependents: dict[int, list[Step]] = {s.index: [] for s in steps}
    open_edges: dict[int, int] = {}
    for s in steps:
        ups = {u.source.index for u in s.upstreams if isinstance(u.source, Step)}
        open_edges[s.index] = len(ups)
        for index in ups:
            dependents[index].append(s)
    by_index = {s.index: s for s in steps}
    ready = [s.index for s in steps if open_edges[s.index] == 0]
    heapq.heapify(ready)  # the lowest declared index first
    ordered: list[Step] = []
    while ready:
        current = by_index[heapq.heappop(ready)]
        ordered.append(current)
        for dependent in dependents[current.index]:
            open_edges[dependent.index] -= 1
            if open_edges[dependent.index] == 0:
                heapq.heappush(ready, dependent.index)
    if len(ordered) < len(steps):
        cycle = find_cycle([s for s in steps if open_edges[s.index] > 0])
        names = " -> ".join(f"{s.name!r}" for s in cycle)
        raise InvalidJobError(
            "after", names, "the workflow has a cycle (each step waits for the one before it): remove one of its edges"
        )
    return ordered


def _upstreams_first(steps: Sequence[Step]) -> bool:
    """Every step's upstream steps were declared before it (``steps`` in declaration order)."""
    # The last upstreams checked: a fan-out's steps share one tuple, whose steps came before the
    # first of them and so before each later one.
    checked: object = None
    for s in steps:
        upstreams = s.upstreams
        if upstreams is checked:
            continue
        for u in upstreams:
            source = u if type(u) is Step else u.source
            if type(source) is Step and source.index >= s.index:
                return False
        checked = upstreams
    return True


def find_cycle(steps: Sequence[Step]) -> list[Step]:
    """One cycle among ``steps`` (each of which has an open upstream edge): first step repeated last."""
    inside = {s.index for s in steps}
    current = steps[0]
    seen: dict[int, int] = {}
    path: list[Step] = []
    while current.index not in seen:
        seen[current.index] = len(path)
        path.append(current)
        current = next(u.source for u in current.upstreams if isinstance(u.source, Step) and u.source.index in inside)
    cycle = path[seen[current.index] :]
    cycle.reverse()  # upstream first, as the edges run
    start = min(range(len(cycle)), key=lambda i: cycle[i].index)  # from the first declared step
    cycle = cycle[start:] + cycle[:start]
    return [*cycle, cycle[0]]
