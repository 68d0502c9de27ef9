"""The kind's timeout on each job row: the claim sets the attempt's deadline from it.

``@job(timeout=...)`` is stored on the row at enqueue (NULL: none), so the database-side rescue
(``deadline_at``) and the worker's executor agree on the kind's deadline instead of the queue's.
Adding a nullable column without a default rewrites nothing.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("awa", "0007_job_autovacuum")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="timeout",
            field=models.DurationField(
                blank=True,
                help_text="the kind's @job(timeout=): the attempt's deadline instead of the queue's",
                null=True,
            ),
        ),
    ]
