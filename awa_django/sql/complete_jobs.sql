-- complete_jobs: mark a batch of running jobs completed (the hot path of finalisation).
-- Parameters: ids (bigint[]), leases (bigint[]): the run_lease each attempt was claimed with.
-- Guard: a row is written only while it is still running under that lease, so a worker whose job
--   was rescued (and perhaps re-claimed) cannot overwrite the newer attempt. RETURNING tells the
--   caller which rows it really finalised. Locking: row locks on the updated rows only.
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
SET state = 'completed',
    finalized_at = now(),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)
WHERE j.id = d.id
  AND (j.state = 'running') IS TRUE
  AND j.run_lease = d.lease
RETURNING j.id
), released AS (
    SELECT awa_release_jobs(array_agg(id), array_fill('completed'::text, ARRAY[count(*)::int])) AS n FROM done
)
SELECT done.id FROM done, released
