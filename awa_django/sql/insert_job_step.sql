-- insert_job_step: record one step of a durable job (awa_django.durable): a step that ran
-- (kind 'step', its result, finished now, started `ran` seconds ago), a sleep (kind 'sleep', waking
-- `delay` seconds from now, its finished_at), or a wait in force (kind 'wait', its event, its
-- deadline `delay` seconds from now or none, not finished). "Now" is the database's clock, or
-- `floor` when that is later (run_jobs(now=...) in a test: its clock moved on).
-- Parameters: job (bigint), name (text), kind (text), attempt (int), result (jsonb or NULL),
--   ran (float8 seconds, NULL for 0), delay (float8 seconds or NULL), event (text or NULL),
--   floor (timestamptz or NULL). Returns the wake time (NULL for a step or a wait without timeout).
-- The first record of a name wins: a record there already (written by a rescued attempt of the
--   same job that got there first) is kept, and nothing is returned; the caller reads it back.
-- On the handler's Django connection: inside an atomic handler's transaction it commits with it,
--   elsewhere on its own (autocommit). Index: the primary key (job_id, name).
INSERT INTO awa_job_step AS s (job_id, name, kind, attempt, started_at, finished_at, wake_at, event, result, timed_out)
SELECT %(job)s::bigint, %(name)s::varchar, %(kind)s::varchar, %(attempt)s::int,
       t.now - coalesce(%(ran)s::float8, 0) * interval '1 second',
       CASE %(kind)s::varchar WHEN 'step' THEN t.now WHEN 'sleep' THEN t.wake END,
       t.wake, coalesce(%(event)s::varchar, ''), %(result)s::jsonb, false
FROM (
    SELECT clock_timestamp() AS now,
           greatest(clock_timestamp(), %(floor)s::timestamptz) + %(delay)s::float8 * interval '1 second' AS wake
) AS t
ON CONFLICT (job_id, name) DO NOTHING
RETURNING s.wake_at, clock_timestamp() AS now
