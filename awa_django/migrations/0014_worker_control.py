"""Worker control: ``awa_worker_request``, an operator's request to one worker (drain and stop,
hold or resume a queue), read by that worker on its settings re-read tick through a partial index
on its pending rows. A new table: nothing existing is rewritten."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("awa", "0013_console"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerRequest",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("instance_id", models.UUIDField(help_text="the WorkerInstance asked")),
                ("worker", models.CharField(help_text="host:pid of that worker when asked", max_length=255)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("drain", "drain and stop"),
                            ("hold", "stop claiming a queue"),
                            ("resume", "claim a held queue again"),
                        ],
                        max_length=16,
                    ),
                ),
                ("queue", models.CharField(blank=True, help_text="hold and resume: the queue", max_length=255)),
                ("requested_by", models.CharField(blank=True, max_length=150)),
                ("requested_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                (
                    "answer",
                    models.CharField(blank=True, help_text="what the worker said when it acted", max_length=255),
                ),
            ],
            options={
                "verbose_name": "worker request",
                "db_table": "awa_worker_request",
                "ordering": ["-id"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("acknowledged_at__isnull", True)),
                        fields=["instance_id"],
                        name="awa_worker_request_pending",
                    )
                ],
            },
        ),
    ]
