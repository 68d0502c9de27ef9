"""How late periodic jobs fire: a per-second schedule on one or more real workers.

    python bench/cron_lag.py --seconds 60 --workers 2

Uses testproject's database (DATABASE_URL, or the embedded server), migrates it, creates the
schedule ``bench_cron_lag`` (``* * * * * *``, kind ``noop``), runs ``awa_worker`` subprocesses
for the given time, stops them, and prints, over the slots fired: how many, duplicates and gaps,
and the percentiles of the insert lag (job created_at - slot) and the start lag (first
attempted_at - slot), both on the database clock.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "bench_cron_lag"


def percentiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    pick = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.9, 0.99)]
    return "p50 {:.1f} ms, p90 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms".format(
        *(1000 * v for v in pick), 1000 * ordered[-1]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=1)
    options = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from awa_django.models import Job, Schedule
    from awa_django.services.schedules import save_schedule

    call_command("migrate", verbosity=0)
    Job.objects.filter(metadata__schedule=NAME).delete()
    Schedule.objects.filter(name=NAME).delete()
    save_schedule(Schedule(name=NAME, kind="noop", cron="* * * * * *"))
    workers = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", "default", "-v", "0"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        for _ in range(options.workers)
    ]
    try:
        time.sleep(options.seconds)  # a benchmark's measured window, not a wait for a condition
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(60)
    Schedule.objects.filter(name=NAME).update(paused=True)

    jobs = list(Job.objects.filter(metadata__schedule=NAME))
    slots = sorted(datetime.fromisoformat(j.metadata["fire_at"]) for j in jobs)
    duplicates = len(slots) - len(set(slots))
    gaps = sum(1 for a, b in itertools.pairwise(slots) if b - a != timedelta(seconds=1))
    first_round = min(j.created_at for j in jobs)
    steady = [j for j in jobs if j.created_at != first_round]  # the first fire may be a coalesced one
    insert_lag = [(j.created_at - datetime.fromisoformat(j.metadata["fire_at"])).total_seconds() for j in steady]
    start_lag = [
        (j.attempted_at - datetime.fromisoformat(j.metadata["fire_at"])).total_seconds()
        for j in steady
        if j.attempted_at is not None
    ]
    print(f"workers={options.workers} window={options.seconds:.0f}s slots fired={len(slots)}")
    print(f"duplicate slots={duplicates} gaps between consecutive slots={gaps}")
    print(
        f"insert lag (created_at - slot): {percentiles(insert_lag)}; mean {1000 * statistics.mean(insert_lag):.1f} ms"
    )
    print(f"start lag (attempted_at - slot): {percentiles(start_lag)}")
    Job.objects.filter(metadata__schedule=NAME).delete()


if __name__ == "__main__":
    main()
