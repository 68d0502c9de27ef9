-- lock_upstream_jobs: existing jobs a new workflow step waits for (Workflow.enqueue), read under
--   FOR SHARE in id order, in the caller's transaction. While the lock is held a worker's
--   finalising write of one of them waits, so it ends after the new edges commit and its release
--   (awa_release_jobs, with a fresh snapshot) sees them: no edge is added to a job that ends unseen.
-- Storage (migration 0023): a finished upstream is in awa_job_done; each table is locked by its own arm.
-- Parameters: ids (bigint[]). Returns (id, state, kind). Index: the primary key, awa_job_done_id_idx.
SELECT id, state, kind
FROM (
    SELECT * FROM (SELECT id, state, kind FROM awa_job WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR SHARE) AS hot
    UNION ALL
    SELECT * FROM (SELECT id, state, kind FROM awa_job_done WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR SHARE) AS done
) AS locked
ORDER BY id
