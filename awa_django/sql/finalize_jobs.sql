-- finalize_jobs: write a batch of outcomes other than a bare completion (retryable, scheduled,
-- failed, cancelled, or completed with a result or progress).
-- Parameters, one array element per job: ids (bigint[]), leases (bigint[]), states (text[]),
--   delays (float8[] seconds from now for run_at, NULL keeps run_at), errors (jsonb[], NULL adds no
--   entry), refunds (int[]: 1 gives the attempt back, as a snooze does), progress (jsonb[], NULL
--   keeps the stored value), results (jsonb[]: the handler's return value, NULL for none).
-- Guard: (id, state = 'running', run_lease) as in complete_jobs. Terminal states set finalized_at.
-- An error entry gets the attempt's start and worker from the row (attempted_at, attempted_by) when
--   a worker claimed it (an in-process attempt has no worker): the attempt history's timeline.
-- Storage (migration 0023): an outcome that waits again (retryable, scheduled) updates the hot row
--   in place; a finished one deletes it from awa_job and inserts it into awa_job_done, whole, as
--   complete_jobs does (and back into awa_job when the job keeps its unique key past its end).
-- Index: the primary key, one probe per id. The state guard is written `(j.state = 'running') IS TRUE`
--   so the planner cannot prove the running-only partial indexes apply: their estimates count live
--   rows, but while an old snapshot holds vacuum back they hold an entry for every job that ever
--   ran, and a plan that scans one of them and hash-joins the ids costs the whole history per batch.
-- Release: the rows this statement ended are handed to awa_release_jobs (migration 0012) once, in
--   this statement's transaction: it consumes their out-edges (workflow dependents) and tells their
--   waiters. Only the write that moved a row out of running returns it, so a late write of a
--   rescued attempt releases nothing and each job's edges are consumed exactly once.
--   A statement that ended no job does not call it (CASE on the count): the function's first probes
--   read awa_job_edge and awa_job_waiter, and a rescue round that only made jobs retryable waited
--   behind any lock on those tables (tests/worker/test_release_only_when_ended.py).
WITH d AS (
    SELECT *
    FROM unnest(
        %(ids)s::bigint[], %(leases)s::bigint[], %(states)s::varchar[], %(delays)s::float8[],
        %(errors)s::jsonb[], %(refunds)s::int[], %(progress)s::jsonb[], %(results)s::jsonb[]
    ) AS d(id, lease, state, delay, error, refund, progress, result)
), waits AS (
    UPDATE awa_job AS j
    SET state = d.state,
        run_at = CASE WHEN d.delay IS NULL THEN j.run_at ELSE now() + d.delay * interval '1 second' END,
        errors = CASE WHEN d.error IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(
            d.error || CASE WHEN j.attempted_by IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('started_at', j.attempted_at, 'worker', j.attempted_by) END
        ) END,
        attempt = j.attempt - d.refund,
        progress = COALESCE(d.progress, j.progress),
        result = d.result,
        finalized_at = NULL,
        heartbeat_at = NULL,
        deadline_at = NULL
    FROM d
    WHERE j.id = d.id
      AND d.state NOT IN ('completed', 'failed', 'cancelled')
      AND (j.state = 'running') IS TRUE
      AND j.run_lease = d.lease
    RETURNING j.id, j.state
), ended AS (
    DELETE FROM awa_job AS j
    USING d
    WHERE j.id = d.id
      AND d.state IN ('completed', 'failed', 'cancelled')
      AND (j.state = 'running') IS TRUE
      AND j.run_lease = d.lease
    RETURNING j.*,
        d.state AS new_state,
        d.refund,
        CASE WHEN d.delay IS NULL THEN j.run_at ELSE now() + d.delay * interval '1 second' END AS new_run_at,
        CASE WHEN d.error IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(
            d.error || CASE WHEN j.attempted_by IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('started_at', j.attempted_at, 'worker', j.attempted_by) END
        ) END AS new_errors,
        COALESCE(d.progress, j.progress) AS new_progress,
        d.result AS new_result,
        (j.unique_key IS NOT NULL AND d.state = ANY(j.unique_states)) AS keeps_key
), moved AS (
    INSERT INTO awa_job_done (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, new_state, priority, attempt - refund, max_attempts, new_run_at, attempted_at, NULL,
           NULL, now(), created_at, new_errors, metadata, tags, new_progress, unique_key, unique_states,
           run_lease, new_result, timeout, fair_key, pending, workflow_id, attempted_by
    FROM ended
    WHERE NOT keeps_key
    RETURNING id, state
), kept AS (
    INSERT INTO awa_job (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, new_state, priority, attempt - refund, max_attempts, new_run_at, attempted_at, NULL,
           NULL, now(), created_at, new_errors, metadata, tags, new_progress, unique_key, unique_states,
           run_lease, new_result, timeout, fair_key, pending, workflow_id, attempted_by
    FROM ended
    WHERE keeps_key
    RETURNING id, state
), done AS (
    SELECT id, state FROM waits
    UNION ALL
    SELECT id, state FROM moved
    UNION ALL
    SELECT id, state FROM kept
), released AS (
    SELECT CASE WHEN count(*) > 0 THEN awa_release_jobs(array_agg(id), array_agg(state::text)) ELSE 0 END AS n
    FROM done
    WHERE state IN ('completed', 'failed', 'cancelled')
)
SELECT done.id FROM done, released
