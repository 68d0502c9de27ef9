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

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from awa_django.conf import awa_settings
from awa_django.exceptions import InvalidJobError, UniqueJobConflictError
from awa_django.jobspec import CopyLines, JobRow, build_row, check_json_object, check_name, copy_text
from awa_django.notices import notices
from awa_django.observability import tracing
from awa_django.sql import JOBS_CHANNEL, statements
from awa_django.states import JobState
from awa_django.workflows.graph import POLICIES, Canvas, Step, Upstream, given_options, order, upstream

if TYPE_CHECKING:
    from awa_django.models import Workflow as WorkflowRow

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
        after: Sequence[Step | Upstream | int | object] = (),
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
        options = given_options(
            queue=queue, priority=priority, run_at=run_at, max_attempts=max_attempts, metadata=metadata, tags=tags,
            unique=unique, fair_key=fair_key,
        )  # fmt: skip
        index = len(self.steps)
        step_name = check_name("name", kind if name is None else name, index)
        created = Step(self, index, kind, args, step_name, options)
        for item in after:
            created.upstreams.append(upstream(item))
        created.before.extend(downstream for downstream, _ in self._joins)
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
    """A workflow of independent jobs with callbacks (good_job style): ``on_success`` runs once
    every job completed (cancelled if one failed or was cancelled), ``on_finish`` once every job
    ended, however. Each callback is a ``step(...)``; it reads the jobs' results by their names."""

    def __init__(
        self,
        name: str,
        *,
        on_success: Canvas | None = None,
        on_finish: Canvas | None = None,
        metadata: Mapping[str, Any] | None = None,
        using: str | None = None,
    ) -> None:
        super().__init__(name, metadata=metadata, using=using)
        self.on_success = on_success
        self.on_finish = on_finish

    def enqueue(self) -> Workflow:
        members = list(self.steps)
        if not members:
            raise InvalidJobError("batch", self.name, "has no jobs; add() at least one")
        if self.on_success is not None:
            self.extend(self.on_success, after=members)
        if self.on_finish is not None:
            self.extend(self.on_finish, after=[Upstream(m, "always") for m in members])
        return super().enqueue()


def _rows(workflow: Workflow, now: datetime) -> list[tuple[Step, JobRow, Any]]:
    from awa_django.managers import kind_defaults

    rows = []
    trace = tracing.current_trace()  # the caller's span, once: every step carries it
    for s in workflow.steps:
        unknown = set(s.options) - _STEP_OPTIONS
        if unknown:
            raise InvalidJobError("step", s.name, f"unknown option(s) {sorted(unknown)}", index=s.index)
        if s.workflow is not workflow:
            raise InvalidJobError("step", s.name, "belongs to another Workflow", index=s.index)
        for u in s.upstreams:
            if isinstance(u.source, Step) and u.source.workflow is not workflow:
                raise InvalidJobError(
                    "after", u.source, f"step {s.name!r} waits for a step of another Workflow", index=s.index
                )
            if u.policy not in POLICIES:
                raise InvalidJobError("policy", u.policy, f"must be one of {sorted(POLICIES)}", index=s.index)
        defaults = kind_defaults(s.kind)
        options = dict(s.options)
        row = build_row(
            s.kind,
            s.args,
            queue=options.get("queue", defaults.queue),
            priority=options.get("priority", defaults.priority),
            run_at=options.get("run_at"),
            max_attempts=options.get("max_attempts", defaults.max_attempts),
            metadata=_traced(options.get("metadata"), trace),
            tags=options.get("tags"),
            unique=options.get("unique"),
            now=now,
            index=s.index,
        )
        # A step's fairness key as at enqueue: its own, else its kind's @job(fair_key=) rule.
        row = row._replace(fair_key=defaults.fair_key_for(row.kind, options.get("fair_key"), row.args, s.index))
        if defaults.args_check is not None:
            defaults.args_check.check(row.kind, row.args, s.index)
        rows.append((s, row, defaults.timeout))
    return rows


def _traced(metadata: Any, trace: Mapping[str, Any] | None) -> Any:
    """``tracing.with_traceparent`` with the trace read once per enqueue: unchanged without one,
    for metadata that carries its own, or that is not a mapping (the validation refuses that)."""
    if trace is None or (metadata is not None and (not isinstance(metadata, Mapping) or "traceparent" in metadata)):
        return metadata
    return {**(metadata or {}), **trace}


def _edges(s: Step) -> dict[Step | int, Upstream]:
    """The step's upstream edges, one per upstream; InvalidJobError for one given twice two ways."""
    merged: dict[Step | int, Upstream] = {}
    for u in s.upstreams:
        seen = merged.get(u.source)
        if seen is not None and seen.policy != u.policy:
            raise InvalidJobError(
                "after",
                u.source,
                f"step {s.name!r} names this upstream twice, with policies {seen.policy!r} and {u.policy!r}; keep one",
                index=s.index,
            )
        merged[u.source] = u
    return merged


def _write(workflow: Workflow) -> None:
    now = timezone.now()
    alias = workflow.using or awa_settings().DATABASE_ALIAS
    rows = {s.index: (row, timeout) for s, row, timeout in _rows(workflow, now)}
    ordered = order(workflow.steps)  # InvalidJobError naming a cycle
    edges = {s.index: _edges(s) for s in workflow.steps}
    existing = sorted({src for e in edges.values() for src in e if isinstance(src, int)})
    downstream_ids = sorted({d for s in workflow.steps for d in s.before})
    connection = connections[alias]
    try:
        with transaction.atomic(using=alias), connection.cursor() as cursor, connection.wrap_database_errors:
            upstream_states: dict[int, tuple[str, str]] = {}
            if existing:
                cursor.execute(statements["lock_upstream_jobs"], {"ids": existing})
                upstream_states = {r[0]: (r[1], r[2]) for r in cursor.fetchall()}
            _check_existing(workflow, edges, upstream_states)
            if downstream_ids:
                _join_downstreams(cursor, workflow, downstream_ids)
            cursor.execute(statements["next_job_ids"], {"count": len(ordered)})
            for s, (job_id,) in zip(ordered, cursor.fetchall(), strict=True):
                s.id = int(job_id)
            if workflow.id is None:
                workflow.id = _create_row(alias, workflow, now).pk
            lines, edge_lines, available = _lines(workflow, ordered, rows, edges, upstream_states, now)
            raw = cursor.cursor
            cursor.execute(statements["begin_copy_jobs"])
            with raw.copy(statements["copy_workflow_jobs"]) as copy:
                copy.write("".join(lines))
            if edge_lines:
                with raw.copy(statements["copy_job_edges"]) as copy:
                    copy.write("".join(edge_lines))
            cursor.execute(statements["end_copy_jobs"], {"channel": JOBS_CHANNEL, "queues": sorted(available)})
    except IntegrityError as exc:
        diag = getattr(exc.__cause__, "diag", None)
        if getattr(diag, "constraint_name", None) == "awa_job_unique_key_uniq":
            raise UniqueJobConflictError(
                "(a workflow step)", [], str(getattr(diag, "message_detail", "") or "")
            ) from None
        raise
    from awa_django.inline import after_enqueue  # not at import: loading the models loads no runner

    after_enqueue(alias, [s.job_id for s in ordered if s.job_id is not None])
    notices.after_enqueue(alias, {row.kind for row, _ in rows.values()}, {row.queue for row, _ in rows.values()})


def _check_existing(
    workflow: Workflow, edges: Mapping[int, Mapping[Step | int, Upstream]], found: Mapping[int, tuple[str, str]]
) -> None:
    for s in workflow.steps:
        for source, u in edges[s.index].items():
            if not isinstance(source, int):
                continue
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


def _create_row(alias: str, workflow: Workflow, now: datetime) -> WorkflowRow:
    from awa_django.models import Workflow as WorkflowRow

    return WorkflowRow.objects.using(alias).create(name=workflow.name, created_at=now, metadata=workflow.metadata)


def _lines(
    workflow: Workflow,
    ordered: Sequence[Step],
    rows: Mapping[int, tuple[JobRow, Any]],
    edges: Mapping[int, Mapping[Step | int, Upstream]],
    upstream_states: Mapping[int, tuple[str, str]],
    now: datetime,
) -> tuple[list[str], list[str], set[str]]:
    """COPY lines of the jobs and the edges, and the queues that get available jobs."""
    copy = CopyLines(now)
    lines: list[str] = []
    edge_lines: list[str] = []
    available: set[str] = set()
    joins = dict(workflow._joins)
    for s in ordered:
        row, timeout = rows[s.index]
        pending = 0
        for source, u in edges[s.index].items():
            if isinstance(source, Step):
                up_id, name = source.id, u.name or source.name
                pending += 1
            else:
                state, kind = upstream_states[source]
                up_id, name = source, u.name or kind
                pending += 0 if JobState(state).is_terminal else 1
            edge_lines.append(f"{up_id}\t{s.id}\t{copy_text(name)}\t{POLICIES[u.policy]}\n")
        for downstream in sorted(set(s.before)):
            edge_lines.append(f"{s.id}\t{downstream}\t{copy_text(s.name)}\t{joins.get(downstream, 0)}\n")
        if pending:
            state = JobState.WAITING
        elif row.run_at is not None and row.run_at > now:
            state = JobState.SCHEDULED
        else:
            state = JobState.AVAILABLE
            available.add(row.queue)
        interval = None if timeout is None else repr(timeout.total_seconds())
        lines.append(f"{s.id}\t{workflow.id}\t{pending}\t" + copy.row_line(row, state, timeout=interval))
    return lines, edge_lines, available
