"""What the console's search indexes cost the hot path: enqueue and drain with each candidate set
of indexes on awa_job, alternated in one database (issue 28).

    python bench/search_indexes.py                          # 20,000 jobs, 3 repetitions
    python bench/search_indexes.py --jobs 50000 --reps 5 --single 2000

Each repetition, for each variant in rotating order: an emptied, vacuumed ``awa_job`` with the
variant's indexes; ``--jobs`` jobs with realistic args and tags enqueued by ``enqueue_many`` (COPY)
and ``--single`` more by ``enqueue`` one at a time (autocommit: a transaction each), both timed;
then every job drained by the project's own ``claim_jobs`` + ``complete_jobs`` (``floor.py``'s
floor: no worker process, so the figure is the database's cost and nothing else).

Variants:

- **none**: the schema without the search indexes;
- **full**: GIN ``jsonb_path_ops`` on args and GIN on tags, over every row;
- **finished**: the same two indexes partial on the finished states (completed, failed,
  cancelled), what migration 0015 creates;
- **finished+queued**: those, plus the same pair partial on the states before running (waiting,
  scheduled, available, retryable) and a GIN on the tags of failed jobs: what migration 0017 adds
  (its trigram index on failed jobs' errors is left out: these jobs never fail).

Every claim and every completion changes ``state``, a column of the partial hot-path indexes, so no
update of awa_job is HOT: each writes a new entry into every index whose predicate the new row
version meets. A full index therefore pays on insert, on claim and on completion; a partial one on
the finished states once, at the final write; the queued pair once, at enqueue (a claim moves the
row to running, which it leaves out). The database is ``awa_bench_search``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import floor

DB_NAME = "awa_bench_search"
FINISHED = "WHERE state IN ('completed', 'failed', 'cancelled')"
QUEUED = "WHERE state IN ('waiting', 'scheduled', 'available', 'retryable')"
VARIANTS: dict[str, list[str]] = {
    "none": [],
    "full": [
        "CREATE INDEX awa_bench_args_idx ON awa_job USING gin (args jsonb_path_ops)",
        "CREATE INDEX awa_bench_tags_idx ON awa_job USING gin (tags)",
    ],
    "finished": [
        f"CREATE INDEX awa_bench_args_idx ON awa_job USING gin (args jsonb_path_ops) {FINISHED}",
        f"CREATE INDEX awa_bench_tags_idx ON awa_job USING gin (tags) {FINISHED}",
    ],
    "finished+queued": [
        f"CREATE INDEX awa_bench_args_idx ON awa_job USING gin (args jsonb_path_ops) {FINISHED}",
        f"CREATE INDEX awa_bench_tags_idx ON awa_job USING gin (tags) {FINISHED}",
        f"CREATE INDEX awa_bench_queued_args_idx ON awa_job USING gin (args jsonb_path_ops) {QUEUED}",
        f"CREATE INDEX awa_bench_queued_tags_idx ON awa_job USING gin (tags) {QUEUED}",
        "CREATE INDEX awa_bench_failed_tags_idx ON awa_job USING gin (tags) WHERE state = 'failed'",
    ],
}
INDEXES = (
    "awa_bench_args_idx", "awa_bench_tags_idx", "awa_bench_queued_args_idx", "awa_bench_queued_tags_idx",
    "awa_bench_failed_tags_idx", "awa_job_args_idx", "awa_job_tags_idx", "awa_job_queued_args_idx",
    "awa_job_queued_tags_idx", "awa_job_failed_tags_idx", "awa_job_errors_trgm_idx", "awa_job_error_text_idx",
)  # fmt: skip


def prepare(variant: str) -> None:
    """An empty awa_job with exactly the variant's search indexes (the migration's dropped)."""
    with floor.connect() as conn:
        conn.execute("TRUNCATE awa_job")
        for name in INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")  # constants of this module
        for statement in VARIANTS[variant]:
            conn.execute(statement)
        conn.execute("VACUUM ANALYZE awa_job")


def spec(i: int) -> dict[str, Any]:
    return {
        "kind": "noop",
        "queue": floor.QUEUE,
        "args": {"user_id": i % 5000, "order": {"id": i, "lines": [i % 7, i % 11]}, "email": f"u{i}@example.com"},
        "tags": [f"tenant-{i % 50}", "bench"],
    }


def enqueue(n: int, single: int) -> tuple[float, float]:
    """Jobs per second: n by COPY in batches of 10,000, then ``single`` one by one."""
    from awa_django.models import Job

    started = time.perf_counter()
    for start in range(0, n, 10_000):
        Job.objects.enqueue_many([spec(i) for i in range(start, min(start + 10_000, n))])
    bulk = n / (time.perf_counter() - started)
    started = time.perf_counter()
    for i in range(single):
        s = spec(n + i)
        Job.objects.enqueue("noop", s["args"], queue=floor.QUEUE, tags=s["tags"])
    one = single / (time.perf_counter() - started)
    with floor.connect() as conn:
        conn.execute("VACUUM ANALYZE awa_job")
    return bulk, one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=1_000, help="jobs enqueued one at a time")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()
    floor.setup(DB_NAME)
    names = list(VARIANTS)
    figures: dict[str, dict[str, list[float]]] = {v: {"bulk": [], "single": [], "drain": []} for v in names}
    for rep in range(args.reps):
        for variant in names[rep % len(names) :] + names[: rep % len(names)]:
            prepare(variant)
            bulk, one = enqueue(args.jobs, args.single)
            drain = floor.floor_once(args.jobs + args.single, args.connections, args.batch)
            for key, value in (("bulk", bulk), ("single", one), ("drain", drain)):
                figures[variant][key].append(value)
            print(f"  rep {rep + 1} {variant}: bulk {bulk:,.0f}/s single {one:,.0f}/s drain {drain:,.0f}/s",
                  file=sys.stderr, flush=True)  # fmt: skip
    print(f"{args.jobs:,} jobs by COPY + {args.single:,} one at a time, drained by claim_jobs + complete_jobs "
          f"({args.connections} connections x {args.batch}); medians of {args.reps} rotated repetitions:")  # fmt: skip
    print("| indexes | enqueue_many jobs/s | enqueue jobs/s | drain jobs/s |")
    print("| --- | ---: | ---: | ---: |")
    base = {key: statistics.median(values) for key, values in figures["none"].items()}
    for variant in names:
        med = {key: statistics.median(values) for key, values in figures[variant].items()}
        cells = [f"{med[k]:,.0f} ({med[k] / base[k]:.2f}x)" for k in ("bulk", "single", "drain")]
        print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
