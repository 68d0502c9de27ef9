-- heartbeat_jobs: prove a batch of running attempts is alive, and store their latest progress.
-- Parameters: ids (bigint[]), leases (bigint[]), progress (jsonb[], NULL keeps the stored value).
-- Guard: (id, running, run_lease). RETURNING the ids still held: an attempt
--   missing from the result was rescued or cancelled, and its handler is told to stop.
-- Index: the primary key, one probe per id. The state guard is written `(j.state = 'running') IS TRUE`
--   so the planner cannot prove the running-only partial indexes apply: their estimates count live
--   rows, but while an old snapshot holds vacuum back they hold an entry for every job that ever
--   ran, and a plan that scans one of them and hash-joins the ids costs the whole history per batch.
UPDATE awa_job AS j
SET heartbeat_at = now(),
    progress = COALESCE(d.progress, j.progress)
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(progress)s::jsonb[]) AS d(id, lease, progress)
WHERE j.id = d.id
  AND (j.state = 'running') IS TRUE
  AND j.run_lease = d.lease
RETURNING j.id
