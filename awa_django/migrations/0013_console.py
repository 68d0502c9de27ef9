"""The operator's console: ``Job.attempted_by``, the worker (host:pid) that ran a job's latest
attempt, written by the claim with the attempt's start. Nullable with no default, so adding it
rewrites no table, and inserts need not name it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("awa", "0012_workflows"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="attempted_by",
            field=models.CharField(
                blank=True, help_text="the worker (host:pid) that ran the latest attempt", max_length=255, null=True
            ),
        ),
    ]
