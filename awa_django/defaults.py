"""Every default and limit of a job and a queue, in one place; the rest of the package imports them.

The model fields, the migrations' defaults, the admin form's initial values, the worker's
``QueueConfig``, the concurrency package's ``QueueLimits``, ``@job`` and the enqueue API all read
these. Changing a model field default here needs a migration (``makemigrations --check`` says so).
"""

from __future__ import annotations

from typing import Final

# --- a job -------------------------------------------------------------------------------------

QUEUE_DEFAULT: Final = "default"
"""The queue of a job whose kind has no ``@job`` handler and whose enqueue names none."""

PRIORITY_MIN: Final = 1  # highest
PRIORITY_MAX: Final = 4  # lowest
PRIORITY_DEFAULT: Final = 2

MAX_ATTEMPTS_MIN: Final = 1
MAX_ATTEMPTS_MAX: Final = 1000
# The most GLOBAL_MAX_WORKERS (and --global-max-workers) may be: the integer columns that hold it
# (a worker's snapshot, its cluster report, the Cluster settings row) stop at Postgres's int4.
GLOBAL_MAX_WORKERS_MAX: Final = 2**31 - 1
MAX_ATTEMPTS_DEFAULT: Final = 25

NAME_MAX_LENGTH: Final = 255
"""A kind, a queue name, a tag, a schedule name: at most this many characters."""

# --- a queue's capacity (the Queue model, QueueConfig, QueueLimits, the admin form) --------------

MAX_WORKERS_DEFAULT: Final = 50  # hard-reserved mode: jobs of the queue one worker runs at once
MIN_WORKERS_DEFAULT: Final = 0  # weighted mode: slots guaranteed to the queue
WEIGHT_DEFAULT: Final = 1  # weighted mode: share of the overflow pool
RATE_BURST_DEFAULT: Final = 0  # token-bucket burst; 0 means ceil(rate_limit)
# A queue's deadline and priority aging at most (a year, as @job(timeout=)): Postgres's timestamps
# end, and now() plus or minus a longer one can leave them, failing the claim or the aging round.
QUEUE_DURATION_MAX: Final = 365 * 24 * 3600.0  # seconds

# --- the AWA settings (awa_django.conf) and the worker's configuration built from them --------

POLL_INTERVAL_DEFAULT: Final = 1.0  # seconds between polls when no NOTIFY arrives
HEARTBEAT_INTERVAL_DEFAULT: Final = 5.0  # seconds between heartbeats of in-flight jobs
HEARTBEAT_STALENESS_DEFAULT: Final = 30.0  # seconds after which a heartbeat is stale
SHUTDOWN_TIMEOUT_DEFAULT: Final = 30.0  # seconds in-flight jobs get after SIGTERM/SIGINT
COMPLETED_RETENTION_DEFAULT: Final = 86400.0  # seconds a completed job is kept
FAILED_RETENTION_DEFAULT: Final = 7 * 86400.0  # seconds a failed or cancelled job is kept
DATABASE_ALIAS_DEFAULT: Final = "default"
DATABASE_WAIT_TIMEOUT_DEFAULT: Final = 60.0  # seconds awa_worker retries an unreachable database at startup
SYNC_THREADS_DEFAULT: Final = 10
POOL_SIZE_DEFAULT: Final = 4
MAX_TAGS_DEFAULT: Final = 32
SNAPSHOT_INTERVAL_MAX: Final = 5.0  # a worker writes its snapshot every min(HEARTBEAT_INTERVAL, this) seconds
SNAPSHOTS_MISSED_BEFORE_STALE: Final = 3  # a worker whose snapshot is older than this many intervals is not live

# Fair keys inside a queue (awa_django.concurrency.keys): jobs without a key share the default key.
FAIR_KEY_DEFAULT: Final = ""
FAIR_KEY_MAX_LENGTH: Final = 128
KEY_WEIGHT_DEFAULT: Final = 1  # a key's share of its queue's slots, when no FairKey row says otherwise
ADMIN_QUERY_TIMEOUT_DEFAULT: Final = 10.0  # seconds a job-list page's statements may run in the admin
FAIR_KEYS_TOP_DEFAULT: Final = 10  # keys per queue awa_health and the metrics name; the rest are key="other"

# The console's history (awa_django.worker.history writes it, awa_django.services.history reads it).
HISTORY_WINDOW_MINUTES: Final = 24 * 60  # minutes of history kept; older minutes are deleted
HISTORY_TOP: Final = 50  # kinds (and queues) with a row of their own per minute; the rest share name ""
HISTORY_GRACE: Final = 30.0  # seconds after a minute ends before the rollup treats it as final
# Seconds an open transaction holds the rollup's minutes open, at most (worker/history.py): a job
# finished by a transaction open longer is not counted. Below HISTORY_CATCH_UP_MINUTES, so a round
# held open still reaches the current minute. Ten minutes: while a transaction holds them, each
# round re-reads every minute since its start, and a Python script's psycopg connection (not in
# autocommit) sits idle in a transaction between its statements; an atomic handler should end
# well within it (docs/guide/exactly-once.md, "Keep atomic handlers short").
HISTORY_OPEN_TRANSACTION_MAX: Final = 10 * 60.0
HISTORY_CATCH_UP_MINUTES: Final = 60  # minutes one rollup round reads at most (a leader catching up)
HISTORY_EVERY: Final = 10.0  # seconds between the maintenance leader's rollup rounds, at least ...
HISTORY_COST_FACTOR: Final = 20.0  # ... and this many times the last round's duration (a busy minute is re-read)
