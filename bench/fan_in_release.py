"""What one fan-in batch's release costs: ``awa_release_jobs`` as migration 0018 leaves it, against
0016's, side by side on the same rows (issue 25).

    python bench/fan_in_release.py                   # 10,000 steps before one job, batches of 32
    python bench/fan_in_release.py --batch 50 --snapshot

A workflow of one head, ``--width`` steps after it and one tail after them all is enqueued (no
worker runs: queue ``nobody``), in database ``awa_bench_workflows``. Then, for each function in
rotating order, ``--reps`` times: the tail is set waiting with a count no batch can bring to 0, the
table vacuumed (not with ``--snapshot``), and the steps handed to the function ``--batch`` at a
time, each call its own transaction, all in one server-side loop (a DO block that COMMITs after
each call, ``synchronous_commit`` off): what is timed is the function and its commit, not the
client's round trips or the disk's flushes. 0016's function is created under another name from
that migration's text. ``--snapshot`` holds a REPEATABLE READ snapshot from another connection
throughout, so no version of the tail's row can be pruned (docs/storage.md).

Prints milliseconds per call for each function and repetition, then the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from importlib import import_module
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.floor import connect, setup
from bench.workflows import DB_NAME, OldSnapshot, reset

PREVIOUS = "awa_bench_release_0016"


def build(width: int) -> list[int]:
    """The workflow's ids, head first, tail last."""
    from django.db import transaction

    from awa_django.workflows import Workflow

    reset()
    with transaction.atomic():
        wf = Workflow("fan-in")
        head = wf.add("noop", queue="nobody", name="head")
        parts = [wf.add("noop", queue="nobody", after=[head], name="part") for _ in range(width)]
        tail = wf.add("noop", queue="nobody", after=parts, name="tail")
        wf.enqueue()
    return [head.id, *(p.id for p in parts), tail.id]


def install_previous() -> None:
    release: str = import_module("awa_django.migrations.0016_workflows_more").RELEASE
    with connect() as conn:
        conn.execute(release.replace("FUNCTION awa_release_jobs(", f"FUNCTION {PREVIOUS}(", 1))


def per_call(function: str, steps: list[int], tail: int, batch: int, vacuum: bool) -> float:
    with connect() as conn:
        conn.autocommit = True
        conn.execute("SET synchronous_commit = off")
        conn.execute("UPDATE awa_job SET state = 'waiting', pending = %s WHERE id = %s", [len(steps) + 1, tail])
        if vacuum:
            conn.execute("VACUUM awa_job")
        ids = "{" + ",".join(map(str, steps)) + "}"
        started = time.perf_counter()
        # The function's name and the batch are this module's own values; the ids are integers.
        conn.execute(
            f"""DO $$
            DECLARE a bigint[] := '{ids}'::bigint[]; i int := 1;
                    s text[] := array_fill('completed'::text, ARRAY[{batch}]);
            BEGIN
                WHILE i <= cardinality(a) LOOP
                    PERFORM {function}(a[i:i + {batch} - 1], s[1:least({batch}, cardinality(a) - i + 1)]);
                    COMMIT;
                    i := i + {batch};
                END LOOP;
            END $$"""
        )
        return 1000 * (time.perf_counter() - started) / -(-len(steps) // batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=32, help="steps per call (a completer batch)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--snapshot", action="store_true", help="hold an old snapshot throughout")
    args = parser.parse_args()
    setup(DB_NAME)
    install_previous()
    ids = build(args.width)
    steps, tail = ids[1:-1], ids[-1]
    snapshot = OldSnapshot() if args.snapshot else None
    figures: dict[str, list[float]] = {}
    try:
        for rep in range(args.reps):
            order = ["awa_release_jobs", PREVIOUS] if rep % 2 == 0 else [PREVIOUS, "awa_release_jobs"]
            for function in order:
                ms = per_call(function, steps, tail, args.batch, vacuum=snapshot is None)
                figures.setdefault(function, []).append(ms)
                print(f"repetition {rep + 1}: {function} {ms:.3f} ms a call", flush=True)
    finally:
        if snapshot is not None:
            snapshot.close()
    print(f"\nwidth {args.width}, batches of {args.batch}, snapshot held: {args.snapshot} (medians)\n")
    print("| function | ms a call |\n| --- | ---: |")
    for function, values in figures.items():
        label = "0018 (now)" if function == "awa_release_jobs" else "0016 (before)"
        print(f"| {label} | {statistics.median(values):.3f} |")


if __name__ == "__main__":
    main()
