"""``awa_job_pending_queue_idx``: a btree on (queue, state) of scheduled and retryable jobs, built
CONCURRENTLY (the migration is not atomic; an interrupted build leaves an INVALID index: drop it
with DROP INDEX CONCURRENTLY and migrate again).

The dashboard's, the queue list's and awa_health's counts (``count_queue_jobs.sql``) read each
counted state's partial index with the queue first, index-only and per queue, so that the console
can stop each count at its bound. The scheduled and retryable states had only
``awa_job_pending_run_at_idx`` (run_at, for the promotion), which has no queue: their counts read
the table. One entry per job scheduled, retried or snoozed; a job enqueued to run now takes none.
"""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("awa", "0019_release_by_key"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                fields=["queue", "state"],
                condition=models.Q(state__in=["scheduled", "retryable"]),
                name="awa_job_pending_queue_idx",
            ),
        ),
    ]
