-- rearm_jobs: "retry workflow": failed and cancelled jobs of one workflow run again, in order:
--   each becomes waiting with pending set to its upstream edges that are open again (or available
--   when none is), due now, with one more attempt allowed where it had used them all.
-- Parameters: ids (bigint[]), states (text[]: 'waiting' or 'available'), pendings (int[]),
--   max_attempts_max (int). Returns (id, queue, state) of the rows it changed.
-- Storage (migration 0023): a finished job is in awa_job_done (moved back into awa_job, whole, with
--   its id) or, when it kept its unique key past its end, still in awa_job (updated in place).
-- Index: the primary keys (awa_job_done_id_idx in each partition). Locking: the caller
--   (awa_django.workflows.services.retry_workflow) has locked the workflow's jobs FOR UPDATE; only
--   rows still failed or cancelled are changed.
WITH d AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(states)s::varchar[], %(pendings)s::int[]) AS d(id, state, pending)
), back AS (
    DELETE FROM awa_job_done AS j
    USING d
    WHERE j.id = d.id
      AND j.state IN ('failed', 'cancelled')
    RETURNING j.*, d.state AS new_state, d.pending AS new_pending
), revived AS (
    INSERT INTO awa_job (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, new_state, priority, attempt,
           greatest(max_attempts, least(attempt + 1, %(max_attempts_max)s::int)), now(), attempted_at, NULL,
           NULL, NULL, created_at, errors, metadata, tags, progress, unique_key, unique_states,
           run_lease, result, timeout, fair_key, new_pending, workflow_id, attempted_by
    FROM back
    RETURNING id, queue, state
), hot AS (
    UPDATE awa_job AS j
    SET state = d.state,
        pending = d.pending,
        run_at = now(),
        finalized_at = NULL,
        heartbeat_at = NULL,
        deadline_at = NULL,
        max_attempts = greatest(j.max_attempts, least(j.attempt + 1, %(max_attempts_max)s::int))
    FROM d
    WHERE j.id = d.id
      AND j.state IN ('failed', 'cancelled')
    RETURNING j.id, j.queue, j.state
)
SELECT id, queue, state FROM revived
UNION ALL
SELECT id, queue, state FROM hot
