"""Cluster scope: each worker's row keeps the rate parts it read at its last report (``read_rates``),
so the leader publishes a larger part for one worker only from what the others' parts, as they last
read them, leave under the queue's rate: reduce before grant, as for the caps.

The column has a database default, so a worker of the previous version, still reporting during a
rolling deploy (its upsert does not name the column), keeps working.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("awa", "0028_release_skips_parked")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE awa_worker_capacity ADD COLUMN read_rates jsonb NOT NULL DEFAULT '{}'::jsonb",
                    "ALTER TABLE awa_worker_capacity DROP COLUMN read_rates",
                )
            ],
            state_operations=[
                migrations.AddField(
                    model_name="workercapacity",
                    name="read_rates",
                    field=models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="{queue: jobs/s} the rate parts it read (and applied) at its last report",
                    ),
                )
            ],
        )
    ]
