-- release_jobs: hand back attempts a stopping worker could not finish within its shutdown timeout:
-- retryable and due now (or failed when it was the last attempt), with an error entry, so they do
-- not wait for their heartbeat to go stale. Parameters: ids (bigint[]), leases (bigint[]),
-- reason (text). Guard: (id, running, run_lease).
UPDATE awa_job AS j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END,
    run_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'error', %(reason)s::text, 'attempt', j.attempt, 'at', now()
    )),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)
WHERE j.id = d.id
  AND j.state = 'running'
  AND j.run_lease = d.lease
RETURNING j.id
