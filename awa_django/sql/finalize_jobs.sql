-- finalize_jobs: write a batch of non-completed outcomes (retryable, scheduled, failed, cancelled).
-- Parameters, one array element per job: ids (bigint[]), leases (bigint[]), states (text[]),
--   delays (float8[] seconds from now for run_at, NULL keeps run_at), errors (jsonb[], NULL adds no
--   entry), refunds (int[]: 1 gives the attempt back, as a snooze does), progress (jsonb[], NULL
--   keeps the stored value), results (jsonb[]: the handler's return value, NULL for none).
-- Guard: (id, state = 'running', run_lease) as in complete_jobs. Terminal states set finalized_at.
-- An error entry gets the attempt's start and worker from the row (attempted_at, attempted_by) when
--   a worker claimed it (an in-process attempt has no worker): the attempt history's timeline.
-- Index: the primary key, one probe per id. The state guard is written `(j.state = 'running') IS TRUE`
--   so the planner cannot prove the running-only partial indexes apply: their estimates count live
--   rows, but while an old snapshot holds vacuum back they hold an entry for every job that ever
--   ran, and a plan that scans one of them and hash-joins the ids costs the whole history per batch.
-- Release: the rows this statement ended are handed to awa_release_jobs (migration 0012) once, in
--   this statement's transaction: it consumes their out-edges (workflow dependents) and tells their
--   waiters. Only the write that moved a row out of running returns it, so a late write of a
--   rescued attempt releases nothing and each job's edges are consumed exactly once.
WITH done AS (
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
    finalized_at = CASE WHEN d.state IN ('completed', 'failed', 'cancelled') THEN now() END,
    heartbeat_at = NULL,
    deadline_at = NULL
FROM unnest(
    %(ids)s::bigint[], %(leases)s::bigint[], %(states)s::varchar[], %(delays)s::float8[],
    %(errors)s::jsonb[], %(refunds)s::int[], %(progress)s::jsonb[], %(results)s::jsonb[]
) AS d(id, lease, state, delay, error, refund, progress, result)
WHERE j.id = d.id
  AND (j.state = 'running') IS TRUE
  AND j.run_lease = d.lease
RETURNING j.id, j.state
), released AS (
    SELECT awa_release_jobs(array_agg(id), array_agg(state::text)) AS n
    FROM done
    WHERE state IN ('completed', 'failed', 'cancelled')
)
SELECT done.id FROM done, released
