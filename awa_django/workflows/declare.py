"""``Workflow``: declare jobs that wait for jobs, then write them in the caller's transaction.

``enqueue`` validates the whole graph before it writes anything (every step as ``enqueue``
validates a job; a cycle, an unknown upstream id, or an ``on_success`` edge from a job that
already failed or was cancelled raise ``InvalidJobError``), then writes, on Django's connection
and so inside the caller's transaction: the ids of every new job in one ``nextval`` round trip,
the workflow row, the jobs with one COPY and the edges with another. Jobs whose upstreams have
all ended go in ``available`` (``scheduled`` when their run_at is ahead); the others ``waiting``,
with ``pending`` counting their open upstream edges. Ids follow the dependency order, so running
a workflow's ids in order (immediate mode) runs every upstream first.

An edge from an existing job is checked under ``FOR SHARE`` on that row (lock_upstream_jobs), so
the job cannot end between the check and the commit without its release seeing the new edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import IntegrityError, OperationalError, connections, transaction
from django.utils import timezone

from awa_django.conf import awa_settings
from awa_django.deadlocks import unique_deadlock
from awa_django.exceptions import InvalidJobError, UniqueJobConflictError
from awa_django.jobspec import CopyLines, build_row, check_json_object, check_name, copy_json, copy_text
from awa_django.notices import notices
from awa_django.observability import tracing
from awa_django.sql import JOBS_CHANNEL, statements
from awa_django.states import JobState
from awa_django.validation import UnstorableValueError, storable_json
from awa_django.workflows.graph import POLICIES, Canvas, Step, Upstream, order, upstream

if TYPE_CHECKING:
    from awa_django.managers import KindDefaults
    from awa_django.models import Workflow as WorkflowRow

# Lines per COPY write: small enough that the server has the first ones to insert while Python
# formats the rest, large enough that a write is not a call per line.
_CHUNK = 500
_STEP_OPTIONS = frozenset({"queue", "priority", "run_at", "max_attempts", "metadata", "tags", "unique", "fair_key"})


class Workflow:
    """A graph of jobs, enqueued together; see the module docstring and docs/guide/workflows.md.

    >>> wf = Workflow("import-42")
    >>> fetch = wf.add("fetch", {"url": url})
    >>> parse = wf.add("parse", after=[fetch])
    >>> wf.add("report", after=[fetch, parse])
    >>> wf.enqueue()
    """

    def __init__(self, name: str, *, metadata: Mapping[str, Any] | None = None, using: str | None = None) -> None:
        self.name = check_name("workflow name", name, None)
        self.metadata, self._metadata_json = check_json_object("workflow metadata", metadata, None)
        self.using = using
        self.steps: list[Step] = []
        self.id: int | None = None  # set by enqueue, or by extending
        self._joins: list[tuple[int, int]] = []  # (downstream id, policy) every new step is before
        self._enqueued = False
        self._names: set[str] = set()  # step names check_name accepted
        # The last single upstream given to add() and its edges, shared by the steps after it.
        self._alone: tuple[object, tuple[Step | Upstream, ...]] | None = None

    @classmethod
    def extending(cls, job_id: int, *, using: str | None = None) -> Workflow:
        """The running job ``job_id``'s workflow, to add steps to (dynamic fan-out). Every step
        added is also an upstream of the jobs that wait for ``job_id`` (with the same policy), so a
        fan-in after that job waits for the new steps too. InvalidJobError if it is in none."""
        from awa_django.models import Job, JobEdge

        alias = using or awa_settings().DATABASE_ALIAS
        row = Job.objects.using(alias).filter(pk=job_id).values_list("workflow_id", "workflow__name").first()
        if row is None or row[0] is None:
            raise InvalidJobError("job_id", job_id, "is not a job of a workflow; only a workflow's steps extend it")
        workflow = cls(row[1] or "workflow", using=alias)
        workflow.id = row[0]
        workflow._joins = list(
            JobEdge.objects.using(alias)
            .filter(upstream_id=job_id)
            .order_by("downstream_id")
            .values_list("downstream_id", "policy")
        )
        return workflow

    def add(
        self,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        after: Iterable[Step | Upstream | int | object] = (),
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        unique: Any = None,
        fair_key: str | None = None,
    ) -> Step:
        """Declare a job that runs after every upstream in ``after`` (steps of this workflow, ids
        of existing jobs, or ``always(...)`` of either); ``name`` (the kind by default) is how its
        dependents read its result. The other options are ``Job.objects.enqueue``'s."""
        if self._enqueued:
            raise InvalidJobError("workflow", self.name, "was enqueued already; declare a new Workflow")
        # The options given, in given_options' order (a step's frame key follows it); spelt out,
        # as this runs once per step of a graph of thousands.
        options: dict[str, Any] = {}
        if queue is not None:
            options["queue"] = queue
        if priority is not None:
            options["priority"] = priority
        if run_at is not None:
            options["run_at"] = run_at
        if max_attempts is not None:
            options["max_attempts"] = max_attempts
        if metadata is not None:
            options["metadata"] = metadata
        if tags is not None:
            options["tags"] = tags
        if unique is not None:
            options["unique"] = unique
        if fair_key is not None:
            options["fair_key"] = fair_key
        index = len(self.steps)
        step_name = kind if name is None else name
        if type(step_name) is not str or step_name not in self._names:  # a name is checked once per workflow
            step_name = check_name("name", step_name, index)
            self._names.add(step_name)
        created = Step(self, index, kind, args, step_name, options)
        if after:
            if type(after) is not list and type(after) is not tuple:
                after = tuple(after)  # a set, a generator: taken in its order, as before
            alone = self._alone
            if len(after) == 1 and alone is not None and after[0] is alone[0]:
                created.upstreams = alone[1]  # a fan-out: its steps share one tuple
            else:
                # A Step is its own plain edge (graph.Step.upstreams); anything else is made an Upstream.
                edges = tuple(item if isinstance(item, Step | Upstream) else upstream(item) for item in after)
                created.upstreams = edges
                if len(edges) == 1:
                    self._alone = (after[0], edges)
        if self._joins:
            created.before = [downstream for downstream, _ in self._joins]
        self.steps.append(created)
        return created

    def extend(self, canvas: Canvas, *, after: Sequence[Step | Upstream | int | object] = ()) -> list[Step]:
        """Place a ``chain`` / ``group`` / ``chord`` / ``step`` here, after ``after``; return its
        tails (the steps whose end is its end), for further ``after=``."""
        return canvas.place(self, [upstream(item) for item in after])

    def enqueue(self) -> Workflow:
        """Validate the whole graph, then write it in the caller's transaction (see the module
        docstring); return this workflow with ``id`` and every step's ``id`` set."""
        if self._enqueued:
            raise InvalidJobError("workflow", self.name, "was enqueued already; declare a new Workflow")
        if not self.steps:
            raise InvalidJobError("workflow", self.name, "has no steps; add() at least one")
        _write(self)
        self._enqueued = True
        return self

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, id={self.id}, steps={len(self.steps)})"


class Batch(Workflow):
    """A workflow of independent jobs with callbacks (good_job style), each a ``step(...)`` (or any
    canvas) that reads the jobs' results by their names:

    - ``on_success`` runs once every job completed; cancelled if one failed or was cancelled;
    - ``on_finish`` runs once every job ended, however;
    - ``on_discard`` runs as soon as one job failed for good or was cancelled (once, whatever the
      others do next; ``context.upstreams()`` shows which had ended by then); cancelled, with an
      error saying so, once every job completed.
    """

    def __init__(
        self,
        name: str,
        *,
        on_success: Canvas | None = None,
        on_finish: Canvas | None = None,
        on_discard: Canvas | None = None,
        metadata: Mapping[str, Any] | None = None,
        using: str | None = None,
    ) -> None:
        super().__init__(name, metadata=metadata, using=using)
        self.on_success = on_success
        self.on_finish = on_finish
        self.on_discard = on_discard

    def enqueue(self) -> Workflow:
        members = list(self.steps)
        if not members:
            raise InvalidJobError("batch", self.name, "has no jobs; add() at least one")
        if self.on_success is not None:
            self.extend(self.on_success, after=members)
        if self.on_finish is not None:
            self.extend(self.on_finish, after=[Upstream(m, "always") for m in members])
        if self.on_discard is not None:
            self.extend(self.on_discard, after=[Upstream(m, "on_discard") for m in members])
        return super().enqueue()


_ARGS_MARK = "\x00args"  # placeholders a frame is cut at: no kind or queue holds a NUL (check_name)
_STATE_MARK = "\x00state"
_FRAME_TYPES = {"queue": str, "priority": int, "max_attempts": int, "fair_key": str}


class _Frame(NamedTuple):
    """A COPY line around a step's args and state, shared by the steps of one (kind, options)."""

    head: str  # kind and queue, up to the args
    tail: str  # the tab after the state to the newline; its fair key is empty when derives_key
    queue: str
    derives_key: bool  # the kind's fair_key rule is a callable of the args: applied per step


# One validated step: (head, tail, queue, scheduled, pending, merged). Its COPY line is
# f"{id}\t{workflow}\t{pending}\t{head}{state}{tail}"; head holds kind, queue, args and the tab
# before the state; scheduled: its run_at is ahead (scheduled, not available, once nothing holds
# it); pending: its edges from steps of this workflow (those from existing jobs are counted later);
# merged: its edges, one per upstream, when it names an upstream twice (None: its own upstreams).
# A plain tuple of strings and numbers, without the step: the collector stops tracking it at its
# first pass, so a large workflow's entries never reach the old generation (whose full collection
# costs 65-130 ms here).
_Entry = tuple[str, str, str, bool, int, "list[Step | Upstream] | None"]


def _frame_key(kind: object, options: Mapping[str, Any]) -> tuple[object, ...] | None:
    """The key under which steps share a frame, or None for a step that goes through build_row alone:
    its kind and options, each of its exact type (a bool is no priority, a str subclass may print
    itself oddly), so two steps with one key validate the same way. Options in another order make
    another key: a frame built twice, never a wrong one."""
    if type(kind) is not str:
        return None
    for name, value in options.items():
        if _FRAME_TYPES.get(name) is not type(value):
            return None
    return (kind, *options.items())


class _Plan:
    """Every step of one ``enqueue`` validated in one pass, as ``enqueue`` validates a job.

    A step given only queue / priority / max_attempts / fair_key shares the frame of the first step
    of the same kind and options (``_frame_key``): that step went through ``build_row`` whole, so
    for the next ones only what can differ is checked (their args, the kind's args check, its
    fair_key rule), in the same order. Any other step goes through ``build_row`` itself.
    ``CopyLines`` writes every frame: the column order keeps its one writer.
    """

    def __init__(self, workflow: Workflow, now: datetime) -> None:
        self.workflow = workflow
        self.now = now
        self.trace = tracing.current_trace()  # the caller's span, once: every step carries it
        self.copy = CopyLines(now)
        self.existing: list[tuple[Step, int, Upstream]] = []  # edges from jobs that exist already
        self.kinds: dict[str, KindDefaults] = {}
        self.queues: set[str] = set()
        self._frames: dict[tuple[object, ...], _Frame] = {}
        self._checked: tuple[object, int] = ((), 0)  # the last plain upstreams _edges checked, and their count
        self.unique: dict[int, tuple[str, list[str]]] = {}  # a unique step's index: its key and unique states
        self.entries = {s.index: self._entry(s) for s in workflow.steps}

    def _defaults(self, kind: object) -> KindDefaults:
        from awa_django.managers import kind_defaults  # not at import: the models import this module

        if type(kind) is not str:
            return kind_defaults(kind)  # build_row refuses it next
        found = self.kinds.get(kind)
        if found is None:
            found = self.kinds[kind] = kind_defaults(kind)
        return found

    def _entry(self, s: Step) -> _Entry:
        if s.workflow is not self.workflow:
            raise InvalidJobError("step", s.name, "belongs to another Workflow", index=s.index)
        merged, pending = self._edges(s)
        key = _frame_key(s.kind, s.options)  # None for any option outside _FRAME_TYPES
        frame = None if key is None else self._frames.get(key)
        if frame is None:
            if not s.options.keys() <= _STEP_OPTIONS:
                unknown = set(s.options) - _STEP_OPTIONS
                raise InvalidJobError("step", s.name, f"unknown option(s) {sorted(unknown)}", index=s.index)
            head, tail, queue, scheduled = self._whole(s, key)
        else:
            head, tail = self._shared(s, frame)
            queue, scheduled = frame.queue, False
        return (head, tail, queue, scheduled, pending, merged)

    def _shared(self, s: Step, frame: _Frame) -> tuple[str, str]:
        """A step whose frame an earlier step validated: its args, the args check, its derived key."""
        kind, args, index = s.kind, s.args, s.index
        defaults = self.kinds[kind]
        if type(args) is dict:  # check_json_object's rule, without its Mapping check and copy
            try:
                args_json = storable_json(args) if args else "{}"
            except UnstorableValueError as exc:
                raise InvalidJobError("args", args, exc.reason, index=index) from None
            args_d: dict[str, Any] = args
        else:
            args_d, args_json = check_json_object("args", args, index)
        tail = frame.tail
        if frame.derives_key:
            fair_key = defaults.fair_key_for(kind, None, args_d, index)
            if fair_key:  # the tail ends with the default key's empty field and the newline
                tail = tail[:-1] + copy_text(fair_key) + "\n"
        if defaults.args_check is not None:
            defaults.args_check.check(kind, args_d, index)
        return frame.head + copy_json(args_json) + "\t", tail

    def _whole(self, s: Step, key: tuple[object, ...] | None) -> tuple[str, str, str, bool]:
        """``build_row`` over the whole step; its frame is kept under ``key`` (None: not shared)."""
        defaults = self._defaults(s.kind)
        options = s.options
        row = build_row(
            s.kind,
            s.args,
            queue=options.get("queue", defaults.queue),
            priority=options.get("priority", defaults.priority),
            run_at=options.get("run_at"),
            max_attempts=options.get("max_attempts", defaults.max_attempts),
            metadata=_traced(options.get("metadata"), self.trace),
            tags=options.get("tags"),
            unique=options.get("unique"),
            now=self.now,
            index=s.index,
        )
        if row.unique_key is not None and row.unique_states is not None:
            self.unique[s.index] = (row.unique_key, row.unique_states)
        # A step's fairness key as at enqueue: its own, else its kind's @job(fair_key=) rule.
        fair_key = defaults.fair_key_for(row.kind, options.get("fair_key"), row.args, s.index)
        if defaults.args_check is not None:
            defaults.args_check.check(row.kind, row.args, s.index)
        timeout = defaults.timeout
        # build_row was given no key, so the line ends with the default key's field (split below)
        line = self.copy.row_line(
            row._replace(args_json=_ARGS_MARK),
            _STATE_MARK,
            None if timeout is None else repr(timeout.total_seconds()),
        )
        head, bare_tail = line.split(f"{_ARGS_MARK}\t{_STATE_MARK}")
        # the tail ends with the default key's empty field and the newline
        tail = bare_tail[:-1] + copy_text(fair_key) + "\n" if fair_key else bare_tail
        if key is not None:
            derives = "fair_key" not in options and callable(defaults.fair_key)
            # a key the options or a constant rule give is the same for every step of the frame
            self._frames[key] = _Frame(head, bare_tail if derives else tail, row.queue, derives)
        self.queues.add(row.queue)
        scheduled = row.run_at is not None and row.run_at > self.now
        return head + copy_json(row.args_json) + "\t", tail, row.queue, scheduled

    def _edges(self, s: Step) -> tuple[list[Step | Upstream] | None, int]:
        """The step's upstream edges merged to one per upstream (None when it names none twice), and
        how many come from steps of this workflow; InvalidJobError for a step of another workflow,
        a policy that is none, or an upstream named twice with two policies."""
        upstreams = s.upstreams
        if upstreams is self._checked[0]:  # a fan-out's steps share one tuple (Workflow.add)
            return None, self._checked[1]
        workflow = self.workflow
        pending = 0
        discards = False
        plain = True  # every edge a bare Step: no policy to check, no existing job
        for u in upstreams:
            if type(u) is Step:
                if u.workflow is not workflow:
                    raise _foreign_step(s, u)
                pending += 1
                if discards:
                    _check_discard_edge(s, u, discards)  # raises: on_discard edges mixed with others
                continue
            plain = False
            if u.name:  # an edge's own name is a name like a step's (the empty one: the upstream's)
                check_name("name", u.name, s.index)
            source = u.source
            if isinstance(source, Step):
                if source.workflow is not workflow:
                    raise _foreign_step(s, source)
                pending += 1
            if u.policy not in POLICIES:
                raise InvalidJobError("policy", u.policy, f"must be one of {sorted(POLICIES)}", index=s.index)
            if u.policy == "on_discard" or discards:
                discards = _check_discard_edge(s, u, discards)
        if len(upstreams) > 1:
            named = len(set(upstreams)) if plain else len({u.source for u in upstreams})
            if named < len(upstreams):
                merged, pending = self._merged(s)
                self._add_existing(s, merged)
                return merged, pending
        if plain:
            self._checked = (upstreams, pending)  # nothing in it depends on the step
        else:
            self._add_existing(s, upstreams)
        return None, pending

    def _add_existing(self, s: Step, edges: Sequence[Step | Upstream]) -> None:
        for u in edges:
            if type(u) is not Step and not isinstance(u.source, Step):
                self.existing.append((s, u.source, u))

    def _merged(self, s: Step) -> tuple[list[Step | Upstream], int]:
        """A step that names an upstream more than once: one edge each (the last name), or
        InvalidJobError for one named with two policies."""
        merged: dict[Step | int, Step | Upstream] = {}
        for u in s.upstreams:
            seen = merged.get(u.source)
            if seen is not None and seen.policy != u.policy:
                raise InvalidJobError(
                    "after",
                    u.source,
                    f"step {s.name!r} names this upstream twice, with policies {seen.policy!r} and {u.policy!r}; "
                    "keep one",
                    index=s.index,
                )
            merged[u.source] = u
        return list(merged.values()), sum(isinstance(source, Step) for source in merged)


def _foreign_step(s: Step, source: Step) -> InvalidJobError:
    return InvalidJobError("after", source, f"step {s.name!r} waits for a step of another Workflow", index=s.index)


def _check_discard_edge(s: Step, u: Step | Upstream, discards: bool) -> bool:
    """A step with on_discard edges waits on nothing else (the release counts them apart), and only
    on steps of its workflow (an existing job's end may be past); True once it has one."""
    first = s.upstreams[0]
    if u.policy != "on_discard" or first.policy != "on_discard":
        raise InvalidJobError(
            "after",
            u.source,
            f"step {s.name!r} mixes on_discard edges with {u.policy if u.policy != 'on_discard' else first.policy!r} "
            "ones: a step that runs once one upstream fails waits on on_discard edges only; "
            "put the other edges on a step after it",
            index=s.index,
        )
    if not isinstance(u.source, Step):
        raise InvalidJobError(
            "after",
            u.source,
            f"step {s.name!r}: an on_discard edge comes from a step of the same workflow, not an existing job id",
            index=s.index,
        )
    return True


def _traced(metadata: Any, trace: Mapping[str, Any] | None) -> Any:
    """``tracing.with_traceparent`` with the trace read once per enqueue: unchanged without one,
    for metadata that carries its own, or that is not a mapping (the validation refuses that)."""
    if trace is None or (metadata is not None and (not isinstance(metadata, Mapping) or "traceparent" in metadata)):
        return metadata
    return {**(metadata or {}), **trace}


def _write(workflow: Workflow) -> None:
    now = timezone.now()
    alias = workflow.using or awa_settings().DATABASE_ALIAS
    plan = _Plan(workflow, now)
    ordered = order(workflow.steps)  # InvalidJobError naming a cycle
    existing = sorted({source for _, source, _ in plan.existing})
    downstream_ids = sorted({d for s in workflow.steps for d in s.before}) if workflow._joins else []
    connection = connections[alias]
    try:
        with transaction.atomic(using=alias), connection.cursor() as cursor, connection.wrap_database_errors:
            upstream_states: dict[int, tuple[str, str]] = {}
            if existing:
                cursor.execute(statements["lock_upstream_jobs"], {"ids": existing})
                upstream_states = {r[0]: (r[1], r[2]) for r in cursor.fetchall()}
                _check_existing(plan.existing, upstream_states)
            if downstream_ids:
                _join_downstreams(cursor, workflow, downstream_ids)
                if existing:
                    _check_no_cycle(cursor, plan, downstream_ids)
            cursor.execute(statements["next_job_ids"], {"count": len(ordered)})
            for s, (job_id,) in zip(ordered, cursor.fetchall(), strict=True):
                s.job_id = int(job_id)
            if workflow.id is None:
                workflow.id = _create_row(alias, workflow, now).pk
            edge_lines: list[str] = []
            available: set[str] = set()
            raw = cursor.cursor
            cursor.execute(statements["begin_copy_jobs"])
            with raw.copy(statements["copy_workflow_jobs"]) as copy:
                for text in _lines(workflow, ordered, plan, upstream_states, edge_lines, available):
                    copy.write(text)
            if edge_lines:
                with raw.copy(statements["copy_job_edges"]) as copy:
                    for start in range(0, len(edge_lines), _CHUNK):
                        copy.write("".join(edge_lines[start : start + _CHUNK]))
            cursor.execute(statements["end_copy_jobs"], {"channel": JOBS_CHANNEL, "queues": sorted(available)})
    except IntegrityError as exc:
        diag = getattr(exc.__cause__, "diag", None)
        if getattr(diag, "constraint_name", None) == "awa_job_unique_key_uniq":
            raise UniqueJobConflictError(
                "(a workflow step)", [], str(getattr(diag, "message_detail", "") or "")
            ) from None
        raise
    except OperationalError as exc:
        deadlock = unique_deadlock(exc, (key for key, _ in plan.unique.values()))
        if deadlock is None:
            raise
        raise deadlock from exc.__cause__
    from awa_django.inline import after_enqueue  # not at import: loading the models loads no runner

    after_enqueue(alias, [s.job_id for s in ordered if s.job_id is not None])
    notices.after_enqueue(alias, set(plan.kinds), plan.queues)


def _check_existing(edges: Sequence[tuple[Step, int, Upstream]], found: Mapping[int, tuple[str, str]]) -> None:
    for s, source, u in edges:
        if source not in found:
            raise InvalidJobError(
                "after", source, f"step {s.name!r} waits for job {source}, which does not exist", index=s.index
            )
        state = found[source][0]
        if u.policy == "on_success" and state in (JobState.FAILED, JobState.CANCELLED):
            raise InvalidJobError(
                "after",
                source,
                f"step {s.name!r} waits for job {source} to complete, but it is {state} already; "
                "retry that job first, or use always(...) to run after it whatever its end",
                index=s.index,
            )


def _join_downstreams(cursor: Any, workflow: Workflow, downstream_ids: list[int]) -> None:
    cursor.execute(statements["lock_downstream_jobs"], {"ids": downstream_ids})
    locked = {r[0]: (r[1], r[2]) for r in cursor.fetchall()}
    for job_id in downstream_ids:
        state, workflow_id = locked.get(job_id, (None, None))
        if state != JobState.WAITING or workflow_id != workflow.id:
            raise InvalidJobError(
                "before",
                job_id,
                f"job {job_id} is {state or 'gone'}, not a waiting job of workflow {workflow.id}: "
                "new steps can only join jobs that still wait",
            )
    counts = {job_id: 0 for job_id in downstream_ids}
    for s in workflow.steps:
        for job_id in set(s.before):
            counts[job_id] += 1
    cursor.execute(statements["add_pending_edges"], {"ids": list(counts), "counts": [counts[i] for i in counts]})


def _check_no_cycle(cursor: Any, plan: _Plan, downstream_ids: list[int]) -> None:
    """New steps that join existing jobs as their upstream must not also wait for one of those jobs,
    or for a job after them: InvalidJobError naming the step and the job."""
    candidates = sorted({source for _, source, _ in plan.existing})
    cursor.execute(statements["find_downstream_jobs"], {"ids": downstream_ids, "candidates": candidates})
    reached = {row[0] for row in cursor.fetchall()}
    for s, source, _ in plan.existing:
        if source in reached:
            raise InvalidJobError(
                "after",
                source,
                f"step {s.name!r} would wait for job {source}, which waits (directly or through other jobs) for "
                f"the steps added before jobs {downstream_ids}: a cycle nothing could release; "
                "add the step after the job that extends the workflow instead",
                index=s.index,
            )


def _create_row(alias: str, workflow: Workflow, now: datetime) -> WorkflowRow:
    from awa_django.models import Workflow as WorkflowRow

    return WorkflowRow.objects.using(alias).create(name=workflow.name, created_at=now, metadata=workflow.metadata)


def _lines(
    workflow: Workflow,
    ordered: Sequence[Step],
    plan: _Plan,
    upstream_states: Mapping[int, tuple[str, str]],
    edge_lines: list[str],
    available: set[str],
) -> Iterator[str]:
    """The jobs' COPY text, in chunks of ``_CHUNK`` lines, as it is made: ``_write`` sends each
    chunk while the next is built, so the server inserts one while Python formats the other. On
    the way it appends the edges' lines to ``edge_lines`` and the queues that get available jobs
    to ``available``; each step's ``pending`` is its edges from steps plus those from jobs not
    yet ended. The lines of unique steps that the unique index takes come last, in the order of their
    keys, as enqueue_many writes them (awa_django.managers), so that two enqueues of overlapping
    keys never deadlock each other; the ids are the steps' own, so the order changes no id."""
    chunk: list[str] = []
    keyed: list[tuple[str, str]] = []  # (unique key, line)
    unique = plan.unique
    joins = dict(workflow._joins)
    entries = plan.entries
    names: dict[str, str] = {}  # each edge name as COPY text, escaped once
    prefix = f"\t{workflow.id}\t"
    waiting, later, ready = JobState.WAITING.value, JobState.SCHEDULED.value, JobState.AVAILABLE.value
    plain = POLICIES["on_success"]
    for s in ordered:
        head, tail, queue, scheduled, pending, merged = entries[s.index]
        job_id = s.job_id
        for u in s.upstreams if merged is None else merged:
            if type(u) is Step:  # a plain edge, read by the step's name
                text = names.get(u.name)
                if text is None:
                    text = names[u.name] = copy_text(u.name)
                edge_lines.append(f"{u.job_id}\t{job_id}\t{text}\t{plain}\n")
                continue
            source = u.source
            if isinstance(source, Step):
                up_id, name = source.job_id, u.name or source.name
            else:
                state, kind = upstream_states[source]
                up_id, name = source, u.name or kind
                pending += 0 if JobState(state).is_terminal else 1
            text = names.get(name)
            if text is None:
                text = names[name] = copy_text(name)
            edge_lines.append(f"{up_id}\t{job_id}\t{text}\t{POLICIES[u.policy]}\n")
        if s.before:
            for downstream in sorted(set(s.before)):
                edge_lines.append(f"{job_id}\t{downstream}\t{copy_text(s.name)}\t{joins.get(downstream, 0)}\n")
        if pending:
            state = waiting
        elif scheduled:
            state = later
        else:
            state = ready
            available.add(queue)
        line = f"{job_id}{prefix}{pending}\t{head}{state}{tail}"
        key = unique.get(s.index) if unique else None
        if key is not None and state in key[1]:
            keyed.append((key[0], line))
            continue
        chunk.append(line)
        if len(chunk) == _CHUNK:
            yield "".join(chunk)
            chunk.clear()
    chunk.extend(line for _, line in sorted(keyed))
    if chunk:
        yield "".join(chunk)
