-- lock_downstream_jobs: existing waiting jobs that new steps join as upstreams (a step adding jobs
--   to its own workflow: the fan-in after it waits for them too), locked FOR UPDATE in id order in
--   the caller's transaction, before add_pending_edges raises their pending.
-- Parameters: ids (bigint[]). Returns (id, state, workflow_id). Index: the primary key.
SELECT id, state, workflow_id
FROM awa_job
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id
FOR UPDATE
