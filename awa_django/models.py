"""The rows awa_django keeps in the project's Postgres.

- ``Job``: one job, from enqueue to its outcome (the state machine in ``awa_django.states``).
- ``Queue``: a queue's settings (capacity, rate limit, pause), edited in the admin, applied live.
- ``WorkerInstance``: a live worker's health snapshot; ``WorkerRequest``: an operator's request to
  one worker (drain and stop, hold or resume a queue), pending until the worker acknowledges it.
- ``ClusterSettings`` and ``WorkerCapacity``: capacity scope "cluster": the one global maximum,
  and each worker's part of it.
- ``Schedule``: a periodic job.
- ``FairKey``: one fair key's weight and cap inside a queue, overriding the queue's defaults.
- ``LeaderLease``: the maintenance leader's lease behind a transaction pooler.
- ``Workflow`` and ``JobEdge``: jobs that wait for jobs (``awa_django.workflows``).
- ``JobStep`` and ``JobEvent``: durable jobs' steps and the events sent to them.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Now
from django.utils import timezone

from awa_django.cron import CATCH_UP_LIMIT_DEFAULT, CATCH_UP_LIMIT_MAX
from awa_django.defaults import (
    FAIR_KEY_DEFAULT,
    FAIR_KEY_MAX_LENGTH,
    KEY_WEIGHT_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    MAX_WORKERS_DEFAULT,
    MIN_WORKERS_DEFAULT,
    NAME_MAX_LENGTH,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_DEFAULT,
    RATE_BURST_DEFAULT,
    WEIGHT_DEFAULT,
)
from awa_django.managers import JobManager, JobQuerySet
from awa_django.states import CHOICES as STATE_CHOICES
from awa_django.states import TERMINAL_STATES as TERMINAL_STATES
from awa_django.states import JobState as JobState
from awa_django.storable import UnreadableJson


class _EqualsAny(Func):
    """``(value = ANY(array))``: true when a column's value is in an array column."""

    arg_joiner = " = ANY("
    template = "(%(expressions)s))"
    output_field = models.BooleanField()


class JobJSONField(models.JSONField):
    """A job's JSON column: a value nested past Python's recursion limit (jsonb holds any depth;
    enqueue refuses JSON past MAX_JSON_DEPTH, but SQL or another producer may write it) reads as
    an ``storable.UnreadableJson`` instead of raising RecursionError, so the job's page, lists,
    actions and ``run_jobs`` still load the row (the worker's claim reads it the same way, with
    ``storable.read_json``). Migrations see a plain JSONField: the column is the same."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except RecursionError:
            return UnreadableJson(len(value))

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


# Python's timedelta holds at most 999,999,999 days; Postgres's interval up to 178 million years.
# A duration column read past this bound is read as the bound, with its sign (ReadableDurationField).
READABLE_DURATION_DAYS = 900_000_000


class ReadableDurationField(models.DurationField):  # type: ignore[type-arg]
    """A duration column any row of which loads. Our writes are bounded (@job(timeout=) and the
    Queue form take at most a century, conf.SECONDS_MAX), but SQL or another producer may write an interval past
    what a timedelta holds (some 2.7 million years), and the driver then refused the whole row: the
    job's page, the job list and the Queue admin answered 500. Such a value is read as
    ``READABLE_DURATION_DAYS`` days (2.46 million years) with its sign; the worker reads these
    columns in SQL with its own caps (claim_jobs.sql, read_queues.sql). The bound is below the
    timedelta's by more than what the two count differently in a year (Postgres 365.25 days in
    ``extract(epoch ...)``, the driver 365 when it parses years), so a value under it always loads.
    Migrations see a plain DurationField: the column is the same."""

    def select_format(self, compiler: Any, sql: str, params: Any) -> tuple[str, Any]:
        sql, params = super().select_format(compiler, sql, params)
        bound = READABLE_DURATION_DAYS * 86400
        return (
            f"(CASE WHEN abs(extract(epoch FROM {sql})) <= {bound} THEN {sql} "
            f"ELSE sign(extract(epoch FROM {sql})) * interval '{READABLE_DURATION_DAYS} days' END)",
            (*params, *params, *params, *params),
        )

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.DurationField", args, kwargs


class Job(models.Model):
    """One job. The state machine is in docs/design.md; the hot-path indexes are partial on state."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=NAME_MAX_LENGTH)
    queue = models.CharField(max_length=NAME_MAX_LENGTH, default=QUEUE_DEFAULT)
    args = JobJSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=JobState.AVAILABLE)
    priority = models.SmallIntegerField(default=PRIORITY_DEFAULT, help_text="1 (highest) … 4 (lowest)")
    attempt = models.SmallIntegerField(default=0)
    max_attempts = models.SmallIntegerField(default=MAX_ATTEMPTS_DEFAULT)
    run_at = models.DateTimeField(default=timezone.now)
    attempted_at = models.DateTimeField(null=True, blank=True)
    # NULL: never claimed by a worker (or run in-process). No default: claims set it, inserts need not.
    attempted_by = models.CharField(  # noqa: DJ001
        max_length=255, null=True, blank=True, help_text="the worker (host:pid) that ran the latest attempt"
    )
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    errors = JobJSONField(default=list, blank=True, help_text="[{error, traceback, attempt, at}, …]")
    metadata = JobJSONField(default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=NAME_MAX_LENGTH), default=list, blank=True)
    progress = JobJSONField(null=True, blank=True)
    result = JobJSONField(null=True, blank=True, help_text="the handler's return value (JSON), when not None")
    unique_key = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 - NULL = not unique
    unique_states = ArrayField(models.CharField(max_length=16), null=True, blank=True)
    run_lease = models.BigIntegerField(default=0)
    timeout = ReadableDurationField(
        null=True, blank=True, help_text="the kind's @job(timeout=): the attempt's deadline instead of the queue's"
    )
    fair_key = models.CharField(
        max_length=FAIR_KEY_MAX_LENGTH,
        default=FAIR_KEY_DEFAULT,
        db_default=FAIR_KEY_DEFAULT,
        blank=True,
        help_text="the queue's slots are shared fairly between keys (e.g. tenant:42); empty = the default key",
    )
    # A workflow step's workflow, and how many of its upstream edges are still open (it is
    # ``waiting`` while that is above 0). No foreign key: the row stays cheap to write and to delete.
    workflow = models.ForeignKey(
        "Workflow",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="jobs",
    )
    pending = models.IntegerField(default=0, db_default=0, help_text="upstream edges still open (waiting jobs)")

    objects = JobManager.from_queryset(JobQuerySet)()

    class Meta:
        # The view of the hot table awa_job (what is waiting or running) and awa_job_done (what
        # finished, partitioned by finish time): every job by its id, from enqueue until retention
        # (migration 0023, docs/storage.md). The indexes below are the hot table's.
        db_table = "awa_job_all"
        indexes = [
            # claim_jobs: the hot path.
            models.Index(
                fields=["queue", "priority", "run_at", "id"],
                condition=Q(state=JobState.AVAILABLE),
                name="awa_job_available_idx",
            ),
            # The keyed claim: one key's due jobs in claim order.
            models.Index(
                fields=["queue", "fair_key", "priority", "run_at", "id"],
                condition=Q(state=JobState.AVAILABLE),
                name="awa_job_key_available_idx",
            ),
            # A capped key's running count (at most its cap entries are read).
            models.Index(
                fields=["queue", "fair_key"], condition=Q(state=JobState.RUNNING), name="awa_job_key_running_idx"
            ),
            # rescue_stale_jobs: running rows by heartbeat, and by deadline.
            models.Index(fields=["heartbeat_at"], condition=Q(state=JobState.RUNNING), name="awa_job_running_hb_idx"),
            models.Index(fields=["deadline_at"], condition=Q(state=JobState.RUNNING), name="awa_job_running_dl_idx"),
            # promote_due_jobs: scheduled and retryable rows by run_at.
            models.Index(
                fields=["run_at"],
                condition=Q(state__in=[JobState.SCHEDULED, JobState.RETRYABLE]),
                name="awa_job_pending_run_at_idx",
            ),
            # delete_finished_jobs: the finished rows left hot (unique keys held past the end, rows
            # finished before migration 0023).
            models.Index(
                fields=["state", "finalized_at"],
                condition=Q(state__in=[JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED]),
                name="awa_job_finalized_idx",
            ),
            # A workflow's jobs (cancel, retry, the admin's graph); plain jobs have no entry.
            models.Index(fields=["workflow", "id"], condition=Q(workflow__isnull=False), name="awa_job_workflow_idx"),
            # Waiting workflow steps (the search's arm for them, and the dashboard's waiting count):
            # an entry at enqueue of a step that waits, none once it is released. The other states
            # before completion have their own partial indexes already (claim, promotion, rescue);
            # no args or tags index covers them, so that a job pays no GIN entry at enqueue.
            models.Index(fields=["id"], condition=Q(state=JobState.WAITING), name="awa_job_waiting_idx"),
            # The scheduled and retryable counts per queue (services/stats.job_counts), index-only and
            # per queue: awa_job_pending_run_at_idx has no queue column. One entry per job that is
            # scheduled, retried or snoozed; none for a job enqueued to run now.
            models.Index(
                fields=["queue", "state"],
                condition=Q(state__in=[JobState.SCHEDULED, JobState.RETRYABLE]),
                name="awa_job_pending_queue_idx",
            ),
            # Migration 0021 also builds awa_job_error_text_idx where pg_trgm is available (not here:
            # whether it exists depends on the server).
        ]
        constraints = [
            # Unique jobs: enforced by Postgres, only while the row is in one of its unique_states.
            models.UniqueConstraint(
                fields=["unique_key"],
                condition=Q(unique_key__isnull=False) & Q(_EqualsAny(F("state"), F("unique_states"))),
                name="awa_job_unique_key_uniq",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="awa_job_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=MAX_ATTEMPTS_MIN, max_attempts__lte=MAX_ATTEMPTS_MAX),
                name="awa_job_max_attempts_range",
            ),
            models.CheckConstraint(condition=Q(attempt__gte=0), name="awa_job_attempt_non_negative"),
            models.CheckConstraint(condition=~Q(kind=""), name="awa_job_kind_not_empty"),
            models.CheckConstraint(condition=~Q(queue=""), name="awa_job_queue_not_empty"),
            models.CheckConstraint(condition=Q(state__in=list(JobState)), name="awa_job_state_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}#{self.pk} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def wait(self, timeout: float | None = None) -> Any:
        """Block until this job ends and return its result (``awa_django.workflows.waiting.wait``):
        JobFailedError if it failed or was cancelled, TimeoutError after ``timeout`` seconds."""
        from awa_django.workflows.waiting import wait

        return wait(self.pk, timeout, using=self._state.db)

    async def await_result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - wait()'s twin
        """``wait`` for async code."""
        from awa_django.workflows.waiting import await_result

        return await await_result(self.pk, timeout, using=self._state.db)


class JobTable(models.Model):
    """The hot table ``awa_job`` under the view ``Job`` reads: what is waiting or running.

    Not for queries (use ``Job``): it is here so that Django knows the table exists, and its
    ``flush`` (``TransactionTestCase``, ``manage.py flush``) empties it, which it does not do for
    the view. Its state is declared by migration 0023; the table is migration 0001's.
    """

    id = models.BigAutoField(primary_key=True)

    class Meta:
        db_table = "awa_job"
        default_permissions = ()

    def __str__(self) -> str:
        return f"awa_job row {self.pk}"


class FinishedJobTable(models.Model):
    """The finished jobs' table ``awa_job_done`` (partitioned by finish time) under the view
    ``Job`` reads. Not for queries (use ``Job``): declared so that Django's ``flush`` empties it,
    as ``JobTable`` is."""

    id = models.BigAutoField(primary_key=True)

    class Meta:
        db_table = "awa_job_done"
        default_permissions = ()

    def __str__(self) -> str:
        return f"awa_job_done row {self.pk}"


class Queue(models.Model):
    """Per-queue settings, edited in the admin; running workers apply changes live."""

    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    max_workers = models.PositiveIntegerField(
        default=MAX_WORKERS_DEFAULT, help_text="Hard-reserved mode: jobs of this queue a worker runs at once."
    )
    min_workers = models.PositiveIntegerField(
        default=MIN_WORKERS_DEFAULT, help_text="Weighted mode: slots guaranteed to this queue in every worker."
    )
    weight = models.PositiveIntegerField(default=WEIGHT_DEFAULT, help_text="Weighted mode: share of the overflow pool.")
    rate_limit = models.FloatField(
        null=True, blank=True, help_text="At most this many jobs started per second; empty = unlimited."
    )
    rate_burst = models.PositiveIntegerField(
        default=RATE_BURST_DEFAULT, help_text="Token-bucket burst; 0 means ceil(rate_limit)."
    )
    paused = models.BooleanField(default=False)
    deadline = ReadableDurationField(
        null=True,
        blank=True,
        help_text="A running job of this queue is rescued after this long; empty = none.",
    )
    priority_aging = ReadableDurationField(
        null=True,
        blank=True,
        help_text="An available job waiting this long moves up one priority level; empty = never.",
    )
    key_weight = models.PositiveIntegerField(
        default=KEY_WEIGHT_DEFAULT,
        help_text="Each fair key's share of this queue's slots, unless a fair key override says.",
    )
    key_max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="At most this many jobs of one fair key run at once, across every worker; empty = unlimited.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "awa_queue"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(key_weight__gte=1), name="awa_queue_key_weight_positive"),
            models.CheckConstraint(
                condition=Q(key_max_running__isnull=True) | Q(key_max_running__gte=1),
                name="awa_queue_key_max_running_positive",
            ),
            models.CheckConstraint(condition=Q(max_workers__gte=1), name="awa_queue_max_workers_positive"),
            models.CheckConstraint(condition=Q(min_workers__gte=0), name="awa_queue_min_workers_non_negative"),
            models.CheckConstraint(condition=Q(weight__gte=1), name="awa_queue_weight_positive"),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True) | Q(rate_limit__gt=0),
                name="awa_queue_rate_limit_positive",
            ),
            models.CheckConstraint(condition=Q(rate_burst__gte=0), name="awa_queue_rate_burst_non_negative"),
            models.CheckConstraint(condition=~Q(name=""), name="awa_queue_name_not_empty"),
        ]

    def __str__(self) -> str:
        return self.name


class FairKey(models.Model):
    """One fair key's override inside a queue (its weight and cap); keys without a row take the
    queue's defaults, so the admin calls these rows "fair key overrides".

    Running workers apply changes on the same reload as ``Queue`` rows. Keys need no row to be
    used: a job's ``fair_key`` is enough.
    """

    queue = models.CharField(max_length=NAME_MAX_LENGTH)
    key = models.CharField(max_length=FAIR_KEY_MAX_LENGTH, blank=True, help_text="empty = the default key")
    weight = models.PositiveIntegerField(
        null=True, blank=True, help_text="This key's share of the queue's slots; empty = the queue's key weight."
    )
    max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="At most this many of this key's jobs run at once, across every worker; empty = the queue's cap.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "awa_fair_key"
        ordering = ["queue", "key"]
        verbose_name = "fair key override"
        verbose_name_plural = "fair key overrides"
        constraints = [
            models.UniqueConstraint(fields=["queue", "key"], name="awa_fair_key_queue_key_uniq"),
            models.CheckConstraint(condition=~Q(queue=""), name="awa_fair_key_queue_not_empty"),
            models.CheckConstraint(
                condition=Q(weight__isnull=True) | Q(weight__gte=1), name="awa_fair_key_weight_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_running__isnull=True) | Q(max_running__gte=1),
                name="awa_fair_key_max_running_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.key or '(default key)'}"


class ConcurrencyMode(models.TextChoices):
    HARD_RESERVED = "hard_reserved", "hard-reserved"
    WEIGHTED = "weighted", "weighted"


class WorkerInstance(models.Model):
    """A live worker's health snapshot, rewritten every few seconds; stale rows are removed."""

    instance_id = models.UUIDField(unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    mode = models.CharField(max_length=16, choices=ConcurrencyMode.choices)
    global_max_workers = models.PositiveIntegerField(null=True, blank=True)
    queues = models.JSONField(
        default=dict, blank=True, help_text="{queue: {capacity, in_flight, available, …}} at last_seen_at"
    )
    flags = models.JSONField(default=dict, blank=True, help_text="liveness flags: listening, leader, …")

    class Meta:
        db_table = "awa_worker_instance"
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"

    def capacity(self, queue: str) -> dict[str, Any] | None:
        entry = self.queues.get(queue)
        return entry if isinstance(entry, dict) else None


class WorkerAction(models.TextChoices):
    DRAIN = "drain", "drain and stop"
    HOLD = "hold", "stop claiming a queue"
    RESUME = "resume", "claim a held queue again"


class WorkerRequest(models.Model):
    """An operator's request to one worker, made in the admin (``awa_django.services.control``).

    The worker reads its pending requests on its settings re-read tick (``worker/control.py``),
    acts, and writes ``acknowledged_at`` (the database clock) and its ``answer``; until then the
    request is pending. For a hold, the acknowledgement comes only once no claim of the queue is
    under way in that worker, so no attempt of the queue it starts has ``attempted_at`` later than
    ``acknowledged_at``. No foreign key to ``WorkerInstance``: that row is removed when the worker
    stops, and the request stays as the record of what was asked.
    """

    id = models.BigAutoField(primary_key=True)
    instance_id = models.UUIDField(help_text="the WorkerInstance asked")
    worker = models.CharField(max_length=255, help_text="host:pid of that worker when asked")
    action = models.CharField(max_length=16, choices=WorkerAction.choices)
    queue = models.CharField(max_length=NAME_MAX_LENGTH, blank=True, help_text="hold and resume: the queue")
    requested_by = models.CharField(max_length=150, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    answer = models.CharField(max_length=255, blank=True, help_text="what the worker said when it acted")

    class Meta:
        db_table = "awa_worker_request"
        ordering = ["-id"]
        verbose_name = "worker request"
        indexes = [
            models.Index(
                fields=["instance_id"], condition=Q(acknowledged_at__isnull=True), name="awa_worker_request_pending"
            )
        ]

    def __str__(self) -> str:
        what = f"{self.get_action_display()} {self.queue}" if self.queue else self.get_action_display()
        return f"{self.worker}: {what}"

    @property
    def pending(self) -> bool:
        return self.acknowledged_at is None


class CapacityScope(models.TextChoices):
    PROCESS = "process", "process: each worker process applies the capacity settings on its own"
    CLUSTER = "cluster", "cluster: the settings hold for every live worker together"


class ClusterSettings(models.Model):
    """Capacity settings for the whole cluster (scope "cluster"): one row, edited in the admin.

    ``global_max_workers`` is the one global maximum every worker in cluster scope shares; unset,
    the first worker to start fills it in from its own setting. A worker whose own setting
    differs is logged, and the leader then uses the smallest of all the values it sees, so
    workers that disagree never together exceed any of them.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    global_max_workers = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="jobs running at once over every worker in cluster scope; unset: hard-reserved "
        "(each queue's max_workers across the cluster)",
    )

    class Meta:
        db_table = "awa_cluster"
        verbose_name = "cluster settings"
        verbose_name_plural = "cluster settings"

    def __str__(self) -> str:
        return f"cluster: global_max_workers={self.global_max_workers}"


class WorkerCapacity(models.Model):
    """One worker's part of the cluster's capacity (scope "cluster"), rewritten every fraction of
    a second: what it reports (per queue held and demand, the caps it applies, its own global
    maximum) and what the leader published for it (caps, floor caps, rate shares, their lease).
    Written only with the SQL in ``report_capacity`` and ``publish_capacities``."""

    instance_id = models.UUIDField(primary_key=True)
    use = models.JSONField(default=dict, blank=True, help_text="{queue: {held, demand}} as reported")
    applied = models.JSONField(default=dict, blank=True, help_text="{queue: cap} the worker enforces")
    global_max_workers = models.PositiveIntegerField(null=True, blank=True, help_text="the worker's own setting")
    caps = models.JSONField(default=dict, blank=True, help_text="{queue: cap} published by the leader")
    read = models.JSONField(
        default=dict, blank=True, help_text="{queue: cap} the worker read at its last report (it may apply them)"
    )
    floors = models.JSONField(default=dict, blank=True, help_text="{queue: cap} to fall back to without a lease")
    rates = models.JSONField(default=dict, blank=True, help_text="{queue: jobs/s} its part of each rate limit")
    read_rates = models.JSONField(
        default=dict, blank=True, help_text="{queue: jobs/s} the rate parts it read (and applied) at its last report"
    )
    lease_until = models.DateTimeField(null=True, blank=True)
    reported_at = models.DateTimeField()
    planned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "awa_worker_capacity"
        ordering = ["instance_id"]
        verbose_name = "worker capacity"
        verbose_name_plural = "worker capacities"

    def __str__(self) -> str:
        return f"capacity of {self.instance_id}"


_now = timezone.now  # the Schedule model has a field named timezone


class MissedPolicy(models.TextChoices):
    COALESCE = "coalesce", "coalesce: one fire for the latest missed slot"
    CATCH_UP = "catch_up", "catch up: each missed slot, up to catch_up_limit"


class ScheduleSource(models.TextChoices):
    CODE = "code", "code"
    ADMIN = "admin", "admin"


class Schedule(models.Model):
    """A periodic job: fires ``kind`` with ``args`` at each slot of ``cron`` in ``timezone``.

    Declared in code (``@job(..., cron=...)`` or ``schedule(...)``; synchronised at worker start,
    code owns its fields) or created in the admin. The maintenance leader fires due slots with
    fire_schedule.sql, which compares-and-swaps ``last_fire_at``/``next_fire_at``.
    """

    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    kind = models.CharField(max_length=NAME_MAX_LENGTH)
    cron = models.CharField(
        max_length=NAME_MAX_LENGTH,
        help_text="5 fields (minute hour day month weekday), 6 with seconds first, or @daily/@hourly/…",
    )
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA name, e.g. Europe/Paris")
    args = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=NAME_MAX_LENGTH, default=QUEUE_DEFAULT)
    fair_key = models.CharField(
        max_length=FAIR_KEY_MAX_LENGTH,
        default=FAIR_KEY_DEFAULT,
        db_default=FAIR_KEY_DEFAULT,
        blank=True,
        help_text="the fired jobs' fair key; empty = the default key",
    )
    priority = models.SmallIntegerField(default=PRIORITY_DEFAULT, help_text="1 (highest) … 4 (lowest)")
    max_attempts = models.SmallIntegerField(default=MAX_ATTEMPTS_DEFAULT)
    missed = models.CharField(max_length=16, choices=MissedPolicy.choices, default=MissedPolicy.COALESCE)
    catch_up_limit = models.PositiveIntegerField(
        default=CATCH_UP_LIMIT_DEFAULT,
        help_text="catch up: at most this many missed slots fire; older ones are skipped",
    )
    paused = models.BooleanField(default=False)
    source = models.CharField(max_length=8, choices=ScheduleSource.choices, default=ScheduleSource.ADMIN)
    removed_from_code_at = models.DateTimeField(
        null=True, blank=True, help_text="declared in code no more since then: disabled (not deleted)"
    )
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fire_at = models.DateTimeField(null=True, blank=True, help_text="the slot last fired")
    # No foreign key: retention deletes jobs with raw SQL, and a constraint would block it.
    last_job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "awa_schedule"
        ordering = ["name"]
        indexes = [
            # fire_schedule / read_due_schedules: the leader's "what is due" scan.
            models.Index(
                fields=["next_fire_at"],
                condition=Q(paused=False, removed_from_code_at__isnull=True),
                name="awa_schedule_due_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=~Q(name=""), name="awa_schedule_name_not_empty"),
            models.CheckConstraint(condition=~Q(kind=""), name="awa_schedule_kind_not_empty"),
            models.CheckConstraint(condition=~Q(queue=""), name="awa_schedule_queue_not_empty"),
            models.CheckConstraint(condition=Q(missed__in=MissedPolicy.values), name="awa_schedule_missed_valid"),
            models.CheckConstraint(
                condition=Q(catch_up_limit__gte=1, catch_up_limit__lte=CATCH_UP_LIMIT_MAX),
                name="awa_schedule_catch_up_limit_range",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="awa_schedule_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=MAX_ATTEMPTS_MIN, max_attempts__lte=MAX_ATTEMPTS_MAX),
                name="awa_schedule_max_attempts_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return not self.paused and self.removed_from_code_at is None


class LeaderLease(models.Model):
    """A leadership lease on the database clock: the maintenance leader behind a transaction pooler,
    where a session-level advisory lock would not stay with the worker that took it.

    One row per role (``maintenance``). The holder renews ``expires_at`` every round; another worker
    takes the row over only once it expired, with one compare-and-swap statement
    (``acquire_leader_lease``); ``term`` grows by one with each change of holder.
    """

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.UUIDField(help_text="the WorkerInstance id of the leader")
    term = models.BigIntegerField(default=1, help_text="grows by one each time another worker takes the lease")
    acquired_at = models.DateTimeField()
    renewed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "awa_leader_lease"

    def __str__(self) -> str:
        return f"{self.name}: {self.holder} until {self.expires_at:%Y-%m-%d %H:%M:%S}"


class Workflow(models.Model):
    """A graph of jobs enqueued together (``awa_django.workflows.Workflow``); its jobs point here."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    created_at = models.DateTimeField(default=timezone.now)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "awa_workflow"
        ordering = ["-id"]
        constraints = [models.CheckConstraint(condition=~Q(name=""), name="awa_workflow_name_not_empty")]

    def __str__(self) -> str:
        return f"{self.name}#{self.pk}"


class EdgePolicy(models.IntegerChoices):
    """What an upstream job's end does to its dependent."""

    ON_SUCCESS = 0, "on_success: runs once the upstream completed; cancelled if it failed or was cancelled"
    ALWAYS = 1, "always: runs once the upstream ended, however it ended"
    ON_DISCARD = (
        2,
        "on_discard: runs as soon as one such upstream failed or was cancelled; cancelled once all of them completed",
    )


class JobEdge(models.Model):
    """``downstream`` waits for ``upstream``. Read by the release with the primary key (upstream
    first): O(out-edges) per finished job. ``name`` is how the downstream reads the upstream's
    result (``context.upstream(name)``). No foreign keys: ids of jobs retention deleted may stay."""

    pk = models.CompositePrimaryKey("upstream_id", "downstream_id")
    upstream_id = models.BigIntegerField()
    downstream_id = models.BigIntegerField()
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    policy = models.SmallIntegerField(choices=EdgePolicy.choices, default=EdgePolicy.ON_SUCCESS)

    class Meta:
        db_table = "awa_job_edge"
        indexes = [models.Index(fields=["downstream_id"], name="awa_job_edge_downstream_idx")]

    def __str__(self) -> str:
        return f"{self.upstream_id} -> {self.downstream_id} ({self.name})"


class HistoryDimension(models.TextChoices):
    KIND = "kind", "kind"
    QUEUE = "queue", "queue"


class HistoryMinute(models.Model):
    """One minute of finished jobs for one kind or one queue: the console's 24-hour history.

    Written only by the maintenance leader's rollup (``awa_django.worker.history``), which
    replaces whole minutes, so the table holds at most minutes * (2 * HISTORY_TOP + 2)
    rows: the kinds (and queues) beyond the busiest ``HISTORY_TOP`` of a minute are summed into
    one bucket named ``""`` (no kind or queue has an empty name). Durations are seconds.
    """

    minute = models.DateTimeField(help_text="the minute the jobs were finalised in (its start)")
    dimension = models.CharField(max_length=8, choices=HistoryDimension.choices)
    name = models.CharField(max_length=NAME_MAX_LENGTH, blank=True, help_text="the kind or queue; empty: the rest")
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)
    wait_p50 = models.FloatField(null=True, blank=True, help_text="seconds from due (run_at) to the last attempt")
    wait_p95 = models.FloatField(null=True, blank=True)
    run_p50 = models.FloatField(null=True, blank=True, help_text="seconds from the last attempt's start to its end")
    run_p95 = models.FloatField(null=True, blank=True)

    class Meta:
        db_table = "awa_history"
        verbose_name = "history minute"
        constraints = [
            models.UniqueConstraint(fields=["minute", "dimension", "name"], name="awa_history_minute_uniq"),
            models.CheckConstraint(
                condition=Q(dimension__in=HistoryDimension.values), name="awa_history_dimension_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dimension} {self.name or '(the rest)'} at {self.minute:%Y-%m-%d %H:%M}"


class HistoryMark(models.Model):
    """The rollup's watermark: every minute before ``closed_through`` is final in awa_history.

    One row (id 1). The rollup locks it for its transaction, so two leaders (an old one finishing
    its round while a new one starts) take turns rather than double counting.
    """

    id = models.SmallIntegerField(primary_key=True, default=1)
    closed_through = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "awa_history_mark"

    def __str__(self) -> str:
        return f"history final before {self.closed_through}"


class StepKind(models.TextChoices):
    STEP = "step", "step"
    SLEEP = "sleep", "sleep"
    WAIT = "wait", "wait"


class JobStep(models.Model):
    """One step of a durable job (``context.step``, ``sleep``, ``wait_for``): what it returned,
    kept so that later attempts of the job return it without running the step again
    (``awa_django.durable``, docs/guide/durable-jobs.md).

    A ``wait`` with no ``finished_at`` is the wait in force: ``Job.objects.signal`` wakes the job
    when an event of that name comes. A ``sleep``'s ``finished_at`` is its wake time. No foreign
    key: the job moves between ``awa_job`` and ``awa_job_done``; the leader deletes the steps of
    jobs retention dropped (``awa_django.worker.retention``)."""

    pk = models.CompositePrimaryKey("job_id", "name")
    job_id = models.BigIntegerField()
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    kind = models.CharField(max_length=8, choices=StepKind.choices, default=StepKind.STEP)
    attempt = models.IntegerField(help_text="the job's attempt that ran the step")
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="empty: a wait in force; a sleep's is its wake time"
    )
    wake_at = models.DateTimeField(null=True, blank=True, help_text="a sleep's wake time, a wait's deadline")
    event = models.CharField(
        max_length=NAME_MAX_LENGTH, blank=True, default="", db_default="", help_text="what a wait waits for"
    )
    result = models.JSONField(null=True, blank=True, help_text="the step's return value, a wait's payload")
    timed_out = models.BooleanField(default=False, db_default=False, help_text="a wait that ended at its deadline")

    class Meta:
        db_table = "awa_job_step"
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=[k.value for k in StepKind]), name="awa_job_step_kind_valid")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.kind} {self.name!r}"


class JobEvent(models.Model):
    """An event sent to a job (``Job.objects.signal``) that no ``wait_for`` has taken yet. The
    wait that takes it deletes it and keeps its payload in its ``JobStep``."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField()
    event = models.CharField(max_length=NAME_MAX_LENGTH)
    payload = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "awa_job_event"
        indexes = [models.Index(fields=["job_id", "event", "id"], name="awa_job_event_job_idx")]

    def __str__(self) -> str:
        return f"event {self.event!r} to job {self.job_id}"
