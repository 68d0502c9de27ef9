-- lock_upstream_jobs: existing jobs a new workflow step waits for (Workflow.enqueue), read under
--   FOR SHARE in id order, in the caller's transaction. While the lock is held a worker's
--   finalising write of one of them waits, so it ends after the new edges commit and its release
--   (awa_release_jobs, with a fresh snapshot) sees them: no edge is added to a job that ends unseen.
-- Parameters: ids (bigint[]). Returns (id, state, kind). Index: the primary key.
SELECT id, state, kind
FROM awa_job
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id
FOR SHARE
