-- lock_downstream_jobs: existing waiting jobs that new steps join as upstreams (a step adding jobs
--   to its own workflow: the fan-in after it waits for them too), locked FOR UPDATE in id order in
--   the caller's transaction, before add_pending_edges raises their pending.
-- Storage (migration 0023): a finished one is in awa_job_done (and refused by the caller as finished).
-- Parameters: ids (bigint[]). Returns (id, state, workflow_id). Index: the primary key, awa_job_done_id_idx.
SELECT id, state, workflow_id
FROM (
    SELECT * FROM (SELECT id, state, workflow_id FROM awa_job WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE) AS hot
    UNION ALL
    SELECT * FROM (SELECT id, state, workflow_id FROM awa_job_done WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE) AS done
) AS locked
ORDER BY id
