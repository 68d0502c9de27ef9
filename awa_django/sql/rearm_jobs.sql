-- rearm_jobs: "retry workflow": failed and cancelled jobs of one workflow run again, in order:
--   each becomes waiting with pending set to its upstream edges that are open again (or available
--   when none is), due now, with one more attempt allowed where it had used them all.
-- Parameters: ids (bigint[]), states (text[]: 'waiting' or 'available'), pendings (int[]),
--   max_attempts_max (int). Returns (id, queue, state) of the rows it changed.
-- Index: the primary key. Locking: the caller (awa_django.workflows.services.retry_workflow) has
--   locked the workflow's jobs FOR UPDATE; only rows still failed or cancelled are changed.
UPDATE awa_job AS j
SET state = d.state,
    pending = d.pending,
    run_at = now(),
    finalized_at = NULL,
    heartbeat_at = NULL,
    deadline_at = NULL,
    max_attempts = greatest(j.max_attempts, least(j.attempt + 1, %(max_attempts_max)s::int))
FROM unnest(%(ids)s::bigint[], %(states)s::varchar[], %(pendings)s::int[]) AS d(id, state, pending)
WHERE j.id = d.id
  AND j.state IN ('failed', 'cancelled')
RETURNING j.id, j.queue, j.state
