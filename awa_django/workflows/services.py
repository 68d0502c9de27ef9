"""Workflow actions: cancel and retry a workflow by id; what the admin's actions call, and your code can.

Locking contract: the workflow's jobs are locked ``FOR UPDATE`` in id order and re-checked
against their state before they change, in one transaction, as ``awa_django.services.jobs`` does
for single jobs; a worker's finalising write is guarded by ``(id, running, run_lease)``, so a job
cancelled here stays cancelled whatever its handler does next.
"""

from __future__ import annotations

from django.db import connections, transaction

from awa_django.defaults import MAX_ATTEMPTS_MAX
from awa_django.models import EdgePolicy, Job, JobEdge, JobState
from awa_django.services.db import database_alias, notify
from awa_django.services.jobs import cancel_jobs, reopen_edges
from awa_django.sql import JOBS_CHANNEL, statements


def cancel_workflow(workflow_id: int) -> int:
    """Cancel every job of the workflow that has not ended; return how many were cancelled.

    Running jobs are told as by ``cancel_jobs``; their dependents outside the workflow are
    released as for any cancelled job (cancelled on an ``on_success`` edge, run on ``always``).
    """
    alias = database_alias()
    ids = list(
        Job.objects.using(alias)
        .filter(workflow_id=workflow_id)
        .exclude(state__in=[JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED])
        .values_list("pk", flat=True)
    )
    return cancel_jobs(ids)


def retry_workflow(workflow_id: int) -> int:
    """Re-arm the workflow's failed and cancelled jobs so they run again in dependency order;
    return how many were re-armed.

    A re-armed job waits for its upstream jobs that are re-armed too or have not ended; its
    completed upstream jobs count as done (their results stay). A job that waits, on an
    ``on_success`` edge, for a job that failed or was cancelled and is not re-armed (a job outside
    the workflow) is left as it is, and so are the jobs that wait on it that way. A job that is
    not re-armed but still waits for others counts each re-armed upstream again (its edge opens
    again: its next end releases it once more). An ``on_discard`` job whose upstreams all completed
    (and are not re-armed) stays cancelled: nothing was discarded for it to run for.
    """
    alias = database_alias()
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(statements["lock_workflow_jobs"], {"workflow": workflow_id})
            jobs: dict[int, str] = {int(job_id): str(state) for job_id, state in cursor.fetchall()}
        rearm = {job_id for job_id, state in jobs.items() if state in (JobState.FAILED, JobState.CANCELLED)}
        if not rearm:
            return 0
        edges = list(
            JobEdge.objects.using(alias)
            .filter(downstream_id__in=rearm)
            .values_list("upstream_id", "downstream_id", "policy")
        )
        outside = {u for u, _, _ in edges if u not in jobs}
        states = dict(jobs)
        states.update(Job.objects.using(alias).filter(pk__in=outside).values_list("pk", "state"))
        # on_discard jobs, with their upstreams: one that every upstream completed was cancelled by
        # its edges, as a discard callback is once nothing failed; re-armed, it would run at once
        discards: dict[int, list[int]] = {}
        for up, down, policy in edges:
            if policy == EdgePolicy.ON_DISCARD:
                discards.setdefault(down, []).append(up)
        changed = True
        while changed:  # drop jobs that wait for an ended failure nobody re-arms
            changed = False
            for up, down, policy in edges:
                if down not in rearm or up in rearm or policy != EdgePolicy.ON_SUCCESS:
                    continue
                if states.get(up) in (JobState.FAILED, JobState.CANCELLED, None):
                    rearm.discard(down)
                    changed = True
            for down, ups in discards.items():  # and on_discard jobs nothing failed for
                if down in rearm and all(up not in rearm and states.get(up) == JobState.COMPLETED for up in ups):
                    rearm.discard(down)
                    changed = True
        pending = dict.fromkeys(rearm, 0)
        for up, down, _ in edges:
            if down in rearm and (up in rearm or not JobState(states.get(up, JobState.COMPLETED)).is_terminal):
                pending[down] += 1
        ids = sorted(rearm)
        reopen_edges(alias, rearm)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                statements["rearm_jobs"],
                {
                    "ids": ids,
                    "states": [JobState.WAITING.value if pending[i] else JobState.AVAILABLE.value for i in ids],
                    "pendings": [pending[i] for i in ids],
                    "max_attempts_max": MAX_ATTEMPTS_MAX,
                },
            )
            rows = cursor.fetchall()
        queues = sorted({queue for _, queue, state in rows if state == JobState.AVAILABLE})
        if queues:
            notify(statements["notify_available_queues"], {"channel": JOBS_CHANNEL, "queues": queues})
    return len(rows)
