"""Fair keys inside a queue: a job's (and a schedule's) ``fair_key``, the queue's key defaults, and
``FairKey`` rows that override them per key.

``fair_key`` has a constant database default (''), so adding it rewrites no table and every raw
insert path that does not name it files the job under the default key. The keyed claim reads one
key's due jobs from ``awa_job_key_available_idx``; a capped key's running count reads
``awa_job_key_running_idx``. No row is written per claim or per completion for keys.
"""

import awa_django.states
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("awa", "0010_notify_row_trigger"),
    ]

    operations = [
        migrations.CreateModel(
            name="FairKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("queue", models.CharField(max_length=255)),
                ("key", models.CharField(blank=True, help_text="empty = the default key", max_length=128)),
                (
                    "weight",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="This key's share of the queue's slots; empty = the queue's key weight.",
                        null=True,
                    ),
                ),
                (
                    "max_running",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="At most this many of this key's jobs run at once, across every worker; empty = the queue's cap.",
                        null=True,
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "verbose_name": "fairness key",
                "db_table": "awa_fair_key",
                "ordering": ["queue", "key"],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="fair_key",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="the queue's slots are shared fairly between keys (e.g. tenant:42); empty = the default key",
                max_length=128,
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="key_max_running",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="At most this many jobs of one fairness key run at once, across every worker; empty = unlimited.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="key_weight",
            field=models.PositiveIntegerField(
                default=1, help_text="Each fairness key's share of this queue's slots, unless a key row says."
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="fair_key",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="the fired jobs' fairness key; empty = the default key",
                max_length=128,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", awa_django.states.JobState["AVAILABLE"])),
                fields=["queue", "fair_key", "priority", "run_at", "id"],
                name="awa_job_key_available_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", awa_django.states.JobState["RUNNING"])),
                fields=["queue", "fair_key"],
                name="awa_job_key_running_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="queue",
            constraint=models.CheckConstraint(
                condition=models.Q(("key_weight__gte", 1)), name="awa_queue_key_weight_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="queue",
            constraint=models.CheckConstraint(
                condition=models.Q(("key_max_running__isnull", True), ("key_max_running__gte", 1), _connector="OR"),
                name="awa_queue_key_max_running_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="fairkey",
            constraint=models.UniqueConstraint(fields=("queue", "key"), name="awa_fair_key_queue_key_uniq"),
        ),
        migrations.AddConstraint(
            model_name="fairkey",
            constraint=models.CheckConstraint(
                condition=models.Q(("queue", ""), _negated=True), name="awa_fair_key_queue_not_empty"
            ),
        ),
        migrations.AddConstraint(
            model_name="fairkey",
            constraint=models.CheckConstraint(
                condition=models.Q(("weight__isnull", True), ("weight__gte", 1), _connector="OR"),
                name="awa_fair_key_weight_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="fairkey",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_running__isnull", True), ("max_running__gte", 1), _connector="OR"),
                name="awa_fair_key_max_running_positive",
            ),
        ),
    ]
