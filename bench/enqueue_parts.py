"""The parts of an enqueue's database time: the NOTIFY trigger, alternated in one process.

    python bench/enqueue_parts.py insert --jobs 2000 --reps 9   # Job.objects.enqueue in one transaction
    python bench/enqueue_parts.py copy --jobs 50000 --reps 7    # the COPY of enqueue_many's lines

On its own database (``awa_bench_enqueue``, embedded server or DATABASE_URL's), with three wake-up
variants swapped between repetitions (``ALTER TABLE ... ENABLE/DISABLE TRIGGER``):

- ``row``: the product's trigger (migration 0009): a row trigger on available rows;
- ``statement``: 0002's statement trigger with a transition table, re-created here under another
  name;
- ``none``: no trigger at all (what nothing would cost).

``insert`` times ``--jobs`` ``Job.objects.enqueue`` calls inside one transaction (no commit in the
loop: the statement's own cost, which a commit's WAL flush hides on a slow disk); ``copy`` times
the COPY of ``--jobs`` prepared lines (``copy_jobs``) with the trigger firing for them, which
``enqueue_many`` itself avoids. It prints each variant's µs per job and the median of the paired
ratios to the statement trigger.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402  (the path above first)

DB_NAME = "awa_bench_enqueue"
STATEMENT_TRIGGER = """
CREATE OR REPLACE FUNCTION awa_bench_notify_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awa_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM awa_new_jobs WHERE state = 'available') AS q;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS awa_bench_notify_statement ON awa_job;
CREATE TRIGGER awa_bench_notify_statement AFTER INSERT ON awa_job
REFERENCING NEW TABLE AS awa_new_jobs FOR EACH STATEMENT EXECUTE FUNCTION awa_bench_notify_statement();
"""
VARIANTS = {"statement": "awa_bench_notify_statement", "row": "awa_job_notify_insert", "none": None}


def use(variant: str) -> None:
    with floor.connect() as conn:
        conn.execute("TRUNCATE awa_job")
        for name, trigger in VARIANTS.items():
            if trigger is not None:
                conn.execute(f"ALTER TABLE awa_job {'ENABLE' if name == variant else 'DISABLE'} TRIGGER {trigger}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["insert", "copy"])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    floor.setup(DB_NAME)
    import logging

    from django.db import connection, transaction
    from django.utils import timezone

    from awa_django import managers
    from awa_django.models import Job
    from awa_django.sql import statements

    logging.getLogger("awa_django").setLevel(logging.ERROR)  # the "no live worker" notice
    with floor.connect() as conn:
        conn.execute(STATEMENT_TRIGGER)
    bulk = managers._Bulk(timezone.now())
    for index in range(args.jobs if args.what == "copy" else 0):
        bulk.add(index, {"kind": "noop", "queue": floor.QUEUE, "args": {"seq": index}})
    data = "".join(bulk.lines)
    took: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for rep in range(args.reps):
            for variant in VARIANTS if rep % 2 == 0 else list(VARIANTS)[::-1]:
                use(variant)
                started = time.perf_counter()
                if args.what == "insert":
                    with transaction.atomic():
                        for seq in range(args.jobs):
                            Job.objects.enqueue("noop", {"seq": seq}, queue=floor.QUEUE)
                else:
                    with connection.cursor() as cursor, cursor.cursor.copy(statements["copy_jobs"]) as copy:
                        copy.write(data)
                took[variant].append((time.perf_counter() - started) / args.jobs * 1e6)
    finally:
        with floor.connect() as conn:
            conn.execute("DROP TRIGGER IF EXISTS awa_bench_notify_statement ON awa_job")
            conn.execute("ALTER TABLE awa_job ENABLE TRIGGER awa_job_notify_insert")
    print(f"{args.what}, {args.jobs:,} jobs, {args.reps} alternated repetitions:")
    print("| wake-up | µs per job (median) | ÷ statement trigger (median of paired ratios) |")
    print("| --- | ---: | ---: |")
    for variant, values in took.items():
        ratio = statistics.median(v / s for v, s in zip(values, took["statement"], strict=True))
        print(f"| {variant} | {statistics.median(values):.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
