-- complete_job: end one running job completed, as complete_jobs does a batch: the same guard,
--   storage move, kept unique key and release (read complete_jobs.sql for each), for one row.
-- Parameters: id (bigint), lease (bigint): the run_lease the attempt was claimed with.
-- Why a second statement: a single completion is common (an atomic attempt's, worker/atomic.py,
--   on the handler's connection; a quiet worker's batch of one), and runs prepared. complete_jobs
--   binds arrays, and the planner's generic plan for them assumes more rows than a custom plan
--   for a one-element array, so Postgres plans it again at every execution (pg_prepared_statements:
--   0 generic plans in 12). Measured one job per transaction (BEGIN, the completion, COMMIT):
--   600 µs of server CPU with complete_jobs, 335 with this statement, whose generic plan costs what
--   a custom one does and is kept from the sixth execution.
--   tests/test_storage.py checks that this text is complete_jobs' but for the DELETE's rows.
-- Index: the primary key, one probe. Locking: the deleted row's lock only.
WITH ended AS (
    DELETE FROM awa_job AS j
    WHERE j.id = %(id)s::bigint
      AND (j.state = 'running') IS TRUE
      AND j.run_lease = %(lease)s::bigint
    RETURNING j.*, (j.unique_key IS NOT NULL AND 'completed' = ANY(j.unique_states)) AS keeps_key
), moved AS (
    INSERT INTO awa_job_done (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at, attempted_at, NULL,
           NULL, now(), created_at, errors, metadata, tags, progress, unique_key, unique_states,
           run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    FROM ended
    WHERE NOT keeps_key
    RETURNING id
), kept AS (
    INSERT INTO awa_job (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at, attempted_at, NULL,
           NULL, now(), created_at, errors, metadata, tags, progress, unique_key, unique_states,
           run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    FROM ended
    WHERE keeps_key
    RETURNING id
), done AS (
    SELECT id FROM moved
    UNION ALL
    SELECT id FROM kept
), released AS (
    SELECT CASE WHEN count(*) > 0 THEN awa_release_jobs(array_agg(id), array_fill('completed'::text, ARRAY[count(*)::int])) ELSE 0 END AS n FROM done
)
SELECT done.id FROM done, released
