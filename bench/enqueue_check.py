"""What the call-site argument check costs an enqueue, in CPU time, without the database.

    DJANGO_SETTINGS_MODULE=testproject.settings python bench/enqueue_check.py [--reps 7] [--n 50000]

Times (``time.process_time``, so waiting for a busy CPU is not counted) the validation an enqueue
runs before it writes, for the bench's kind (``noop(seq: int, q: str = "bench")``), with the
handler's argument check and with it switched off, repetitions interleaved:

- single: ``kind_defaults`` + ``build_row`` + the check, per call (what ``Job.objects.enqueue``
  adds to its one INSERT);
- bulk: ``_Bulk.add`` per spec (what ``enqueue_many`` adds to its COPY).

Prints the median microseconds per job of each, and the difference. Divide by a whole enqueue's
time (``bench/run.py --metrics single,bulk``) for the share of the end-to-end cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

from django.utils import timezone  # noqa: E402

from awa_django.managers import _Bulk, kind_defaults  # noqa: E402
from awa_django.registry import JobHandler, job, registry  # noqa: E402

KIND = "bench_check_noop"


def single(n: int) -> float:
    from awa_django.jobspec import build_row

    started = time.process_time()
    for seq in range(n):
        defaults = kind_defaults(KIND)
        row = build_row(
            KIND, {"seq": seq}, queue="bench", priority=defaults.priority, max_attempts=defaults.max_attempts
        )
        if defaults.args_check is not None:
            defaults.args_check.check(row.kind, row.args)
    return (time.process_time() - started) / n * 1e6


def bulk(n: int) -> float:
    specs = [{"kind": KIND, "args": {"seq": seq}, "queue": "bench"} for seq in range(n)]
    started = time.process_time()
    adding = _Bulk(timezone.now())
    for index, spec in enumerate(specs):
        adding.add(index, spec)
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--n", type=int, default=50_000)
    options = parser.parse_args()

    @job(KIND, queue="bench")
    async def noop(seq: int, q: str = "bench") -> None:
        return None

    handler: JobHandler = noop
    check = handler.args_check
    results: dict[tuple[str, bool], list[float]] = {}
    for _ in range(options.reps):
        for checked in (True, False):
            handler.args_check = check if checked else None
            for name, measure in (("single", single), ("bulk", bulk)):
                results.setdefault((name, checked), []).append(measure(options.n))
    registry.unregister(KIND)
    print(f"{options.reps} interleaved repetitions of {options.n:,} jobs; median CPU microseconds per job")
    print("| path | without check | with check | added |")
    print("|---|---|---|---|")
    for name in ("single", "bulk"):
        off = statistics.median(results[(name, False)])
        on = statistics.median(results[(name, True)])
        print(f"| {name} | {off:.2f} | {on:.2f} | {on - off:+.2f} ({(on - off) / off * 100:+.1f} %) |")


if __name__ == "__main__":
    main()
