-- complete_jobs: mark a batch of running jobs completed (the hot path of finalisation).
-- Parameters: ids (bigint[]), leases (bigint[]): the run_lease each attempt was claimed with.
-- Guard: a row is written only while it is still running under that lease, so a worker whose job
--   was rescued (and perhaps re-claimed) cannot overwrite the newer attempt. RETURNING tells the
--   caller which rows it really finalised. Locking: row locks on the updated rows only.
-- Index: the primary key, one probe per id. The state guard is written `(j.state = 'running') IS TRUE`
--   so the planner cannot prove the running-only partial indexes apply: their estimates count live
--   rows, but while an old snapshot holds vacuum back they hold an entry for every job that ever
--   ran, and a plan that scans one of them and hash-joins the ids costs the whole history per batch.
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
