-- complete_jobs: mark a batch of running jobs completed (the hot path of finalisation).
-- Parameters: ids (bigint[]), leases (bigint[]): the run_lease each attempt was claimed with.
-- Guard: a row is written only while it is still running under that lease, so a worker whose job
--   was rescued (and perhaps re-claimed) cannot overwrite the newer attempt. RETURNING tells the
--   caller which rows it really finalised. Locking: row locks on the updated rows only.
UPDATE awa_job AS j
SET state = 'completed',
    finalized_at = now(),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)
WHERE j.id = d.id
  AND j.state = 'running'
  AND j.run_lease = d.lease
RETURNING j.id
