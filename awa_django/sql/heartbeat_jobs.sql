-- heartbeat_jobs: prove a batch of running attempts is alive, and store their latest progress.
-- Parameters: ids (bigint[]), leases (bigint[]), progress (jsonb[], NULL keeps the stored value).
-- Index: primary key. Guard: (id, running, run_lease). RETURNING the ids still held: an attempt
--   missing from the result was rescued or cancelled, and its handler is told to stop.
UPDATE awa_job AS j
SET heartbeat_at = now(),
    progress = COALESCE(d.progress, j.progress)
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(progress)s::jsonb[]) AS d(id, lease, progress)
WHERE j.id = d.id
  AND j.state = 'running'
  AND j.run_lease = d.lease
RETURNING j.id
