"""``manage.py awa_health``: a container probe. Prints each live worker and each queue's health.

Exit status 0 when at least one worker is live (a snapshot newer than ``--stale-after``) and not
stopping, no unpaused queue's oldest available job has waited longer than ``--max-age``, and no
unpaused queue with available jobs lacks a live worker serving it; 1 otherwise (the reasons on
stderr, once; stdout has the report). ``--json`` prints the report as one JSON object; each
queue's ``keys`` there are its ``AWA['FAIR_KEYS_TOP']`` fairness keys with the most available and
the most running jobs, then one ``"other"`` entry summing the rest (bounded however many keys).
Each queue's counts by state stop past ``COUNT_LIMIT`` (10,000), as the console's do: such a count
is reported as the bound, its state listed in ``counts_capped`` (``failed=10000+`` in the text),
so the probe costs the same on a history of any size.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone

from awa_django.conf import InvalidSettingsError, awa_settings
from awa_django.management.arguments import seconds
from awa_django.services.cluster import (
    cluster_capacity,
    default_stale_after,
    global_maximum,
    live_workers,
    worker_healthy,
    worker_scope,
)
from awa_django.services.keys import top_keys
from awa_django.services.stats import COUNT_LIMIT, format_age, queue_stats
from awa_django.states import JobState


class Command(BaseCommand):
    help = (
        "Report the health of awa workers and queues. Exit status 0 when at least one worker is live "
        "and healthy, no queue's oldest available job is older than --max-age and every unpaused queue "
        "with available jobs has a live worker serving it; 1 otherwise."
    )
    requires_system_checks: list[str] = []  # a probe must be quick; `check` is a separate step

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument(
            "--max-age",
            type=seconds,
            default=300.0,
            metavar="SECONDS",
            help="unhealthy when an unpaused queue's oldest available job waited longer (default: 300)",
        )
        parser.add_argument(
            "--stale-after",
            type=seconds,
            default=None,
            metavar="SECONDS",
            help="a worker whose snapshot is older is not live (default: 3 snapshot intervals"
            f"{_current_stale_after()})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:  # no system checks run first: a bad setting is said here, not as a traceback
            awa_settings()
        except InvalidSettingsError as exc:
            raise CommandError(f"cannot check: {exc}", returncode=2) from exc
        max_age: float = options["max_age"]
        stale_after: float = options["stale_after"] or default_stale_after()
        now = timezone.now()
        try:
            workers = live_workers(stale_after, now=now)
            stats = queue_stats(None, workers=workers, limit=COUNT_LIMIT)
            keys = top_keys(awa_settings().FAIR_KEYS_TOP)
        except DatabaseError as exc:
            raise CommandError(f"unhealthy: cannot read the job tables: {exc}".strip(), returncode=2) from exc

        problems: list[str] = []
        healthy = [w for w in workers if worker_healthy(w)]
        if not workers:
            problems.append(f"no live worker (none wrote a snapshot in the last {stale_after:g}s)")
        elif not healthy:
            problems.append(f"no healthy worker: all {len(workers)} live worker(s) are stopping")
        queue_reports = []
        for entry in stats.values():
            age = entry.oldest_available_age(now)
            too_old = age is not None and age.total_seconds() > max_age and not entry.paused
            if too_old and age is not None:
                problems.append(
                    f"queue {entry.name!r}: the oldest available job has waited "
                    f"{format_age(age)} ({age.total_seconds():.0f}s > --max-age {max_age:g}s)"
                )
            # With no live worker at all the problem above says it once for every queue.
            unserved = bool(workers) and entry.waiting_without_worker
            if unserved:
                problems.append(
                    f"queue {entry.name!r}: {entry.available} available job(s) and no live worker serves it; "
                    f"start one with `python manage.py awa_worker -q {entry.name}`, or pause the queue"
                )
            per_state = keys.get(entry.name, {})
            queue_keys = {
                str(state): [k.as_dict() for k in per_state.get(state, [])]
                for state in (JobState.AVAILABLE, JobState.RUNNING)
            }
            queue_reports.append(
                entry.as_dict(now)
                | {"healthy": not too_old and not unserved, "too_old": too_old, "no_worker": not entry.capacities}
                | {"keys": queue_keys}
            )

        report = {
            "healthy": not problems,
            "checked_at": now.isoformat(),
            "max_age_seconds": max_age,
            "stale_after_seconds": stale_after,
            "problems": problems,
            "workers": [
                {
                    "worker": str(w),
                    "instance_id": str(w.instance_id),
                    "mode": w.mode,
                    "capacity_scope": worker_scope(w),
                    "global_max_workers": w.global_max_workers,
                    "started_at": w.started_at.isoformat(),
                    "last_seen_at": w.last_seen_at.isoformat(),
                    "seconds_since_seen": round((now - w.last_seen_at).total_seconds(), 3),
                    "healthy": worker_healthy(w),
                    # A snapshot's flags not an object (a hand-written row) read as none, as the pages do.
                    "flags": w.flags if isinstance(w.flags, dict) else {},
                }
                for w in workers
            ],
            "queues": queue_reports,
            "cluster": cluster_capacity(),
        }
        gmax = global_maximum(workers)
        report["global_max_workers"] = {"configured": gmax.configured, "in_force": gmax.in_force, "reason": gmax.reason}
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
        else:
            self._print(report)
        if problems:
            raise CommandError("unhealthy: " + "; ".join(problems), returncode=1)

    def _print(self, report: dict[str, Any]) -> None:
        out = self.stdout
        status = self.style.SUCCESS("healthy") if report["healthy"] else self.style.ERROR("UNHEALTHY")
        out.write(f"awa: {status}")
        out.write(f"workers ({len(report['workers'])} live):")
        for w in report["workers"]:
            gmax = f" global_max={w['global_max_workers']}" if w["global_max_workers"] is not None else ""
            state = "ok" if w["healthy"] else "stopping"
            flags = ",".join(k for k in ("leader", "listening") if w["flags"].get(k)) or "-"
            out.write(
                f"  {w['worker']} {state} mode={w['mode']} capacity_scope={w['capacity_scope']}{gmax} "
                f"seen={w['seconds_since_seen']:.1f}s ago "
                f"in_flight={w['flags'].get('in_flight', 0)} flags={flags}"
            )
        if not report["workers"]:
            out.write("  (none)")
        gmax = report["global_max_workers"]
        if gmax["reason"]:
            in_force = ", ".join(map(str, gmax["in_force"])) or "none"
            out.write(f"global maximum in force {in_force}, configured {gmax['configured']}: {gmax['reason']}")
        cluster = report["cluster"]
        if cluster["workers"]:
            line = (
                f"cluster scope: {cluster['workers']} worker(s), global maximum in force {cluster['in_force']} "
                f"(Cluster settings: {cluster['setting']})"
            )
            if cluster["disagree"]:
                line += (
                    f"; workers disagree: their own settings are {cluster['worker_settings']}, the smallest "
                    "value applies: give them all the same GLOBAL_MAX_WORKERS"
                )
                out.write(self.style.WARNING(line))
            else:
                out.write(line)
        out.write(f"queues ({len(report['queues'])}):")
        for q in report["queues"]:
            capped = set(q["counts_capped"])
            counts = " ".join(f"{state}={n}{'+' if state in capped else ''}" for state, n in q["counts"].items())
            age = q["oldest_available_age_seconds"]
            age_text = f"{age:.0f}s" if age is not None else "-"
            marks = ["TOO OLD"] if q["too_old"] else []
            if q["no_worker"]:  # loud when it is a problem (jobs waiting), quiet otherwise
                marks.append("no worker" if q["healthy"] else "NO WORKER")
            flag = ", ".join(marks) or "ok"
            paused = " paused" if q["paused"] else ""
            out.write(
                f"  {q['name']}{paused} {flag} oldest_available={age_text} {counts} "
                f"in_flight={q['in_flight']} overflow_held={q['overflow_held']}"
            )
            backlog = q["keys"][JobState.AVAILABLE]
            if any(k["key"] or k["other"] for k in backlog):  # more than the default key: say who waits
                top = " ".join(
                    f"other={k['jobs']}({k['keys']} keys)" if k["other"] else f"{k['key'] or '(default)'}={k['jobs']}"
                    for k in backlog
                )
                out.write(f"    keys by backlog: {top}")
        # The problems are the CommandError's message (stderr): not repeated here.


def _current_stale_after() -> str:
    """The --stale-after default with the current settings, for --help (none while one is bad:
    the parser is built before ``handle`` can say which)."""
    try:
        return f", {default_stale_after():g}s with the current settings"
    except InvalidSettingsError:
        return ""
