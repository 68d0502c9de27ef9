"""Workflows: ``awa_release_jobs`` plans its release for the ids it is given, each call.

The function of migration 0012 ran its release as a static statement, so PL/pgSQL cached one plan
per session and, after a few calls, kept a generic one: made without the arrays' sizes, it could
join the released rows as a nested loop whose inner index scan walks the whole id array each time.
A fan-out of 10,000 released by one upstream then cost 10,000 x 10,000 probes (about a minute in
the completer's statement, every other completion waiting behind it). Here:

- a job with no out-edges (every plain job) stops at one index probe of ``awa_job_edge``'s primary
  key (a cached plan, one per session: cheap, and its shape cannot grow with the table);
- the release runs through ``EXECUTE ... USING``: planned each call with the arrays' values, so
  the planner knows how many jobs ended and how many dependents they have, and joins them by key
  (a hash or merge join for a wide fan-out, probes for a few): linear in the edges, whatever was
  planned before;
- the cancelled dependent's error names its upstream from the edges already read (no sub-select per
  cancelled row);
- a third edge policy, ``on_discard`` (2, ``Batch(on_discard=...)``): its dependent runs as soon as
  one such upstream failed or was cancelled (later ends find it no longer waiting and leave it), and
  is cancelled, with an error saying so, once all of them completed.

Same contract as 0012: each downstream row is updated once per call and level, only while it is
still waiting (state guard under the row lock), cascading cancellations level by level.
"""

from importlib import import_module

from django.db import migrations, models

RELEASE = """
CREATE OR REPLACE FUNCTION awa_release_jobs(ended_ids bigint[], ended_states text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    released integer := 0;
    level integer;
BEGIN
    WHILE cardinality(ended_ids) > 0 LOOP
        -- Whoever awaits one of these jobs (Job.wait) is told it ended; no waiter, no NOTIFY.
        PERFORM pg_notify('awa_done', v.job_id::text) FROM awa_job_waiter AS v WHERE v.job_id = ANY(ended_ids);
        EXIT WHEN NOT EXISTS (SELECT 1 FROM awa_job_edge AS e WHERE e.upstream_id = ANY(ended_ids));
        EXECUTE $release$
            WITH ended AS (
                SELECT t.id, t.state FROM unnest($1::bigint[], $2::text[]) AS t(id, state)
            ), hits AS (
                SELECT e.downstream_id AS id,
                       count(*)::int AS n,
                       min(x.id) FILTER (WHERE e.policy = 0 AND x.state <> 'completed') AS doom,
                       (array_agg(format('upstream job %s (%s) ended %s', x.id, e.name, x.state) ORDER BY x.id)
                            FILTER (WHERE e.policy = 0 AND x.state <> 'completed'))[1] AS why,
                       -- an on_discard edge whose upstream failed or was cancelled: run it now
                       coalesce(bool_or(e.policy = 2 AND x.state <> 'completed'), false) AS fire,
                       -- an on_discard dependent none of whose edges failed: cancelled once its last ends
                       bool_or(e.policy = 2) AND NOT bool_or(e.policy = 2 AND x.state <> 'completed') AS spare
                FROM ended AS x
                JOIN awa_job_edge AS e ON e.upstream_id = x.id
                GROUP BY e.downstream_id
            ), changed AS (
                UPDATE awa_job AS w
                SET pending = w.pending - h.n,
                    state = CASE WHEN h.doom IS NOT NULL OR (h.spare AND w.pending - h.n <= 0)
                                      THEN 'cancelled'
                                 WHEN w.pending - h.n > 0 AND NOT h.fire THEN 'waiting'
                                 WHEN w.run_at > w.created_at AND w.run_at > now() THEN 'scheduled'
                                 ELSE 'available' END,
                    run_at = CASE WHEN h.doom IS NOT NULL OR (h.spare AND w.pending - h.n <= 0)
                                       OR (w.pending - h.n > 0 AND NOT h.fire)
                                       THEN w.run_at
                                  WHEN w.run_at > w.created_at AND w.run_at > now() THEN w.run_at
                                  ELSE now() END,
                    finalized_at = CASE WHEN h.doom IS NOT NULL OR (h.spare AND w.pending - h.n <= 0) THEN now() END,
                    errors = CASE WHEN h.doom IS NOT NULL THEN w.errors || jsonb_build_array(jsonb_build_object(
                                      'error', h.why || ': cancelled, as its on_success edge asks',
                                      'attempt', w.attempt,
                                      'at', now()))
                                  WHEN (h.spare AND w.pending - h.n <= 0) THEN w.errors || jsonb_build_array(jsonb_build_object(
                                      'error', 'every upstream job completed: cancelled, as its on_discard edges '
                                               || 'run it only once one of them fails or is cancelled',
                                      'attempt', w.attempt,
                                      'at', now()))
                                  ELSE w.errors
                             END
                FROM hits AS h
                WHERE w.id = h.id
                  AND w.state = 'waiting'
                RETURNING w.id, w.state, w.queue
            ), woken AS (
                SELECT count(pg_notify('awa_jobs', q.queue)) AS n
                FROM (SELECT DISTINCT queue FROM changed WHERE state = 'available') AS q
            )
            SELECT coalesce(array_agg(c.id) FILTER (WHERE c.state = 'cancelled'), '{}'),
                   count(*) FILTER (WHERE c.state <> 'waiting')
            FROM (SELECT * FROM changed) AS c, woken
        $release$ INTO ended_ids, level USING ended_ids, ended_states;
        released := released + level;
        ended_states := array_fill('cancelled'::text, ARRAY[cardinality(ended_ids)]);
    END LOOP;
    RETURN released;
END
$$;
"""


def _previous_release() -> str:
    """Migration 0012's function, to put back when this one is unapplied."""
    forward: str = import_module("awa_django.migrations.0012_workflows").FORWARD
    start = forward.index("CREATE FUNCTION awa_release_jobs")
    end = forward.index("$$;", start) + len("$$;")
    return forward[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


class Migration(migrations.Migration):
    dependencies = [
        ("awa", "0015_history"),
    ]

    operations = [
        migrations.RunSQL(RELEASE, _previous_release()),
        migrations.AlterField(
            model_name="jobedge",
            name="policy",
            field=models.SmallIntegerField(
                choices=[
                    (0, "on_success: runs once the upstream completed; cancelled if it failed or was cancelled"),
                    (1, "always: runs once the upstream ended, however it ended"),
                    (
                        2,
                        "on_discard: runs as soon as one such upstream failed or was cancelled; "
                        "cancelled once all of them completed",
                    ),
                ],
                default=0,
            ),
        ),
    ]
