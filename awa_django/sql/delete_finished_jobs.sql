-- delete_finished_jobs: retention; delete one batch of jobs of one finished state finalised before
-- the cutoff. Parameters: state (text: completed, failed or cancelled), older_than (interval),
-- limit (int). Index: awa_job_finalized_idx (state, finalized_at). Locking: SKIP LOCKED; the caller
-- loops until a batch comes back short.
WITH old AS (
    SELECT id
    FROM awa_job
    WHERE state IN ('completed', 'failed', 'cancelled')
      AND state = %(state)s::varchar
      AND finalized_at < now() - %(older_than)s::interval
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
)
DELETE FROM awa_job AS j
USING old
WHERE j.id = old.id
