-- release_jobs: hand back attempts a stopping worker could not finish within its shutdown timeout:
-- retryable and due now (or failed when it was the last attempt), with an error entry, so they do
-- not wait for their heartbeat to go stale. Parameters: ids (bigint[]), leases (bigint[]),
-- reason (text). Guard: (id, running, run_lease).
-- Index: the primary key, one probe per id. The state guard is written `(j.state = 'running') IS TRUE`
--   so the planner cannot prove the running-only partial indexes apply: their estimates count live
--   rows, but while an old snapshot holds vacuum back they hold an entry for every job that ever
--   ran, and a plan that scans one of them and hash-joins the ids costs the whole history per batch.
-- Release: the rows this statement failed are handed to awa_release_jobs (migration 0012) once, in
--   this statement's transaction: it consumes their out-edges (workflow dependents) and tells their
--   waiters. Only the write that moved a row out of running returns it, so a late write of a
--   rescued attempt releases nothing and each job's edges are consumed exactly once.
--   A statement that ended no job does not call it (CASE on the count): the function's first probes
--   read awa_job_edge and awa_job_waiter, and a rescue round that only made jobs retryable waited
--   behind any lock on those tables (tests/worker/test_release_only_when_ended.py).
WITH done AS (
UPDATE awa_job AS j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END,
    run_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'error', %(reason)s::text, 'attempt', j.attempt, 'at', now()
    ) || CASE WHEN j.attempted_by IS NULL THEN '{}'::jsonb
              ELSE jsonb_build_object('started_at', j.attempted_at, 'worker', j.attempted_by) END),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)
WHERE j.id = d.id
  AND (j.state = 'running') IS TRUE
  AND j.run_lease = d.lease
RETURNING j.id, j.state
), released AS (
    SELECT CASE WHEN count(*) > 0 THEN awa_release_jobs(array_agg(id), array_agg(state::text)) ELSE 0 END AS n FROM done WHERE state = 'failed'
)
SELECT done.id FROM done, released
