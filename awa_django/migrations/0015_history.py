"""The console's history: ``awa_history`` (one row per minute and kind, or minute and queue, of
finished jobs) and ``awa_history_mark`` (the rollup's watermark), both written only by the
maintenance leader (awa_django.worker.history). New, empty tables: nothing is rewritten.

And the console search's indexes on finished jobs (GIN on args with jsonb_path_ops, GIN on tags),
built CONCURRENTLY so a big awa_job keeps taking writes meanwhile: the migration is not atomic
(CREATE INDEX CONCURRENTLY cannot run in a transaction). If one is interrupted, Postgres leaves an
INVALID index behind: drop it (DROP INDEX CONCURRENTLY awa_job_args_idx) and migrate again."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

FINISHED = models.Q(state__in=["completed", "failed", "cancelled"])


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("awa", "0014_worker_control"),
    ]

    operations = [
        migrations.CreateModel(
            name="HistoryMark",
            fields=[
                ("id", models.SmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("closed_through", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "awa_history_mark",
            },
        ),
        migrations.CreateModel(
            name="HistoryMinute",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("minute", models.DateTimeField(help_text="the minute the jobs were finalised in (its start)")),
                ("dimension", models.CharField(choices=[("kind", "kind"), ("queue", "queue")], max_length=8)),
                ("name", models.CharField(blank=True, help_text="the kind or queue; empty: the rest", max_length=255)),
                ("completed", models.IntegerField(default=0)),
                ("failed", models.IntegerField(default=0)),
                ("cancelled", models.IntegerField(default=0)),
                (
                    "wait_p50",
                    models.FloatField(blank=True, help_text="seconds from due (run_at) to the last attempt", null=True),
                ),
                ("wait_p95", models.FloatField(blank=True, null=True)),
                (
                    "run_p50",
                    models.FloatField(
                        blank=True, help_text="seconds from the last attempt's start to its end", null=True
                    ),
                ),
                ("run_p95", models.FloatField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "history minute",
                "db_table": "awa_history",
                "constraints": [
                    models.UniqueConstraint(fields=("minute", "dimension", "name"), name="awa_history_minute_uniq"),
                    models.CheckConstraint(
                        condition=models.Q(("dimension__in", ["kind", "queue"])), name="awa_history_dimension_valid"
                    ),
                ],
            },
        ),
        AddIndexConcurrently(
            model_name="job",
            index=GinIndex(fields=["args"], opclasses=["jsonb_path_ops"], condition=FINISHED, name="awa_job_args_idx"),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=GinIndex(fields=["tags"], condition=FINISHED, name="awa_job_tags_idx"),
        ),
    ]
