"""Durable jobs (issue 46): a job's steps, sleeps and waits (``awa_job_step``) and the events sent
to it that no wait has taken yet (``awa_job_event``).

Side tables keyed by job id, not columns of the job: a job row moves whole between ``awa_job`` and
``awa_job_done`` (docs/storage.md), and most jobs have no step; the claim, the completion and the
move touch neither table. Parked jobs use the states that exist: ``scheduled`` (a sleep, a wait
with a timeout) and ``waiting`` (a wait without one), both in no claim index.
Additive: two new empty tables, no lock on the job tables.
"""


import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('awa', '0024_drop_finished_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('job_id', models.BigIntegerField()),
                ('event', models.CharField(max_length=255)),
                ('payload', models.JSONField(blank=True, null=True)),
                ('sent_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'db_table': 'awa_job_event',
                'indexes': [models.Index(fields=['job_id', 'event', 'id'], name='awa_job_event_job_idx')],
            },
        ),
        migrations.CreateModel(
            name='JobStep',
            fields=[
                ('pk', models.CompositePrimaryKey('job_id', 'name', blank=True, editable=False, primary_key=True, serialize=False)),
                ('job_id', models.BigIntegerField()),
                ('name', models.CharField(max_length=255)),
                ('kind', models.CharField(choices=[('step', 'step'), ('sleep', 'sleep'), ('wait', 'wait')], default='step', max_length=8)),
                ('attempt', models.IntegerField(help_text="the job's attempt that ran the step")),
                ('started_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('finished_at', models.DateTimeField(blank=True, help_text="empty: a wait in force; a sleep's is its wake time", null=True)),
                ('wake_at', models.DateTimeField(blank=True, help_text="a sleep's wake time, a wait's deadline", null=True)),
                ('event', models.CharField(blank=True, db_default='', default='', help_text='what a wait waits for', max_length=255)),
                ('result', models.JSONField(blank=True, help_text="the step's return value, a wait's payload", null=True)),
                ('timed_out', models.BooleanField(db_default=False, default=False, help_text='a wait that ended at its deadline')),
            ],
            options={
                'db_table': 'awa_job_step',
                'constraints': [models.CheckConstraint(condition=models.Q(('kind__in', ['step', 'sleep', 'wait'])), name='awa_job_step_kind_valid')],
            },
        ),
    ]
