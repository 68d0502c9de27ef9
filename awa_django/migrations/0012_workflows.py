"""Workflows: jobs that wait for jobs (awa_django.workflows).

- ``waiting``, a state in no claim index: a step whose upstream jobs have not all ended.
- ``awa_job.workflow_id`` (no foreign key) and ``awa_job.pending`` (open upstream edges), both
  with constant defaults, so adding them rewrites no table; a partial index on workflow_id holds
  no entry for plain jobs.
- ``awa_job_edge(upstream_id, downstream_id, name, policy)``: the release reads a finished job's
  out-edges by the primary key, so it costs O(out-edges), never a scan of the workflow.
- ``awa_release_jobs(ids, states)``: called by the statements that end jobs (complete_jobs,
  finalize_jobs, the rescue, cancel and discard) with the ids they ended and how; it consumes
  those jobs' out-edges once, in their transaction, and cascades a cancellation level by level.
- ``awa_job_waiter``: the jobs someone awaits (``Job.wait``); only those are NOTIFYed at their end.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

FORWARD = """
CREATE UNLOGGED TABLE awa_job_waiter (
    job_id bigint NOT NULL,
    token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, token)
);

-- Consume the out-edges of jobs that just ended (ids, and the state each ended in), in the
-- caller's statement and transaction. Each downstream row is updated once per call and level:
-- pending drops by its edges that ended; at 0 it becomes available, due now (scheduled while a
-- run_at it was enqueued with is ahead: one later than its created_at). An on_success edge whose
-- upstream did not complete cancels the downstream at once, with an error naming the upstream,
-- and the downstream's own out-edges are consumed in turn.
-- Only rows still waiting are touched (state guard, re-checked under the row lock), so a
-- downstream cancelled meanwhile is left alone and no edge is consumed twice; the callers call it
-- only from the one write that moved an upstream out of running (or waiting, for a cancel).
-- Index: awa_job_edge's primary key (upstream_id first), then awa_job's primary key: both
-- lookups are also written `= ANY(array)`, so the plan probes them by key whatever the planner
-- believes of the tables' sizes (a cached plan made while they looked empty hash-joined a
-- sequential scan of awa_job: every batch of a fan-in paid for the whole table).
CREATE FUNCTION awa_release_jobs(ended_ids bigint[], ended_states text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    released integer := 0;
    level integer;
BEGIN
    WHILE cardinality(ended_ids) > 0 LOOP
        -- Whoever awaits one of these jobs (Job.wait) is told it ended; no waiter, no NOTIFY.
        PERFORM pg_notify('awa_done', v.job_id::text) FROM awa_job_waiter AS v WHERE v.job_id = ANY(ended_ids);
        WITH ended AS (
            SELECT t.id, t.state FROM unnest(ended_ids, ended_states) AS t(id, state)
        ), hits AS (
            SELECT e.downstream_id AS id,
                   count(*)::int AS n,
                   min(x.id) FILTER (WHERE e.policy = 0 AND x.state <> 'completed') AS doom
            FROM ended AS x
            JOIN awa_job_edge AS e ON e.upstream_id = x.id
            WHERE e.upstream_id = ANY(ended_ids)
            GROUP BY e.downstream_id
        ), changed AS (
            UPDATE awa_job AS w
            SET pending = w.pending - h.n,
                state = CASE WHEN h.doom IS NOT NULL THEN 'cancelled'
                             WHEN w.pending - h.n > 0 THEN 'waiting'
                             WHEN w.run_at > w.created_at AND w.run_at > now() THEN 'scheduled'
                             ELSE 'available' END,
                run_at = CASE WHEN h.doom IS NOT NULL OR w.pending - h.n > 0 THEN w.run_at
                              WHEN w.run_at > w.created_at AND w.run_at > now() THEN w.run_at
                              ELSE now() END,
                finalized_at = CASE WHEN h.doom IS NOT NULL THEN now() END,
                errors = CASE WHEN h.doom IS NULL THEN w.errors
                              ELSE w.errors || jsonb_build_array(jsonb_build_object(
                                  'error', (SELECT format('upstream job %s (%s) ended %s', x.id, e.name, x.state)
                                            FROM ended AS x
                                            JOIN awa_job_edge AS e ON e.upstream_id = x.id AND e.downstream_id = w.id
                                            WHERE x.id = h.doom)
                                           || ': cancelled, as its on_success edge asks',
                                  'attempt', w.attempt,
                                  'at', now()))
                         END
            FROM hits AS h
            WHERE w.id = h.id
              AND w.id = ANY(ARRAY(SELECT id FROM hits))
              AND w.state = 'waiting'
            RETURNING w.id, w.state, w.queue
        ), woken AS (
            SELECT count(pg_notify('awa_jobs', q.queue)) AS n
            FROM (SELECT DISTINCT queue FROM changed WHERE state = 'available') AS q
        )
        SELECT coalesce(array_agg(c.id) FILTER (WHERE c.state = 'cancelled'), '{}'),
               count(*) FILTER (WHERE c.state <> 'waiting')
        INTO ended_ids, level
        FROM (SELECT * FROM changed) AS c, woken;
        released := released + level;
        ended_states := array_fill('cancelled'::text, ARRAY[cardinality(ended_ids)]);
    END LOOP;
    RETURN released;
END
$$;
"""

BACKWARD = """
DROP FUNCTION awa_release_jobs(bigint[], text[]);
DROP TABLE awa_job_waiter;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('awa', '0011_fair_keys'),
    ]

    operations = [
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.CreateModel(
            name='JobEdge',
            fields=[
                ('pk', models.CompositePrimaryKey('upstream_id', 'downstream_id', blank=True, editable=False, primary_key=True, serialize=False)),
                ('upstream_id', models.BigIntegerField()),
                ('downstream_id', models.BigIntegerField()),
                ('name', models.CharField(max_length=255)),
                ('policy', models.SmallIntegerField(choices=[(0, 'on_success: runs once the upstream completed; cancelled if it failed or was cancelled'), (1, 'always: runs once the upstream ended, however it ended')], default=0)),
            ],
            options={
                'db_table': 'awa_job_edge',
            },
        ),
        migrations.CreateModel(
            name='Workflow',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=255)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('metadata', models.JSONField(blank=True, default=dict)),
            ],
            options={
                'db_table': 'awa_workflow',
                'ordering': ['-id'],
            },
        ),
        migrations.RemoveConstraint(
            model_name='job',
            name='awa_job_state_valid',
        ),
        migrations.AddField(
            model_name='job',
            name='pending',
            field=models.IntegerField(db_default=0, default=0, help_text='upstream edges still open (waiting jobs)'),
        ),
        migrations.AlterField(
            model_name='job',
            name='state',
            field=models.CharField(choices=[('waiting', 'waiting'), ('scheduled', 'scheduled'), ('available', 'available'), ('running', 'running'), ('completed', 'completed'), ('retryable', 'retryable'), ('failed', 'failed'), ('cancelled', 'cancelled')], default='available', max_length=16),
        ),
        migrations.AddIndex(
            model_name='jobedge',
            index=models.Index(fields=['downstream_id'], name='awa_job_edge_downstream_idx'),
        ),
        migrations.AddConstraint(
            model_name='workflow',
            constraint=models.CheckConstraint(condition=models.Q(('name', ''), _negated=True), name='awa_workflow_name_not_empty'),
        ),
        migrations.AddField(
            model_name='job',
            name='workflow',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='jobs', to='awa.workflow'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('workflow__isnull', False)), fields=['workflow', 'id'], name='awa_job_workflow_idx'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('state__in', ['waiting', 'scheduled', 'available', 'running', 'completed', 'retryable', 'failed', 'cancelled'])), name='awa_job_state_valid'),
        ),
    ]
