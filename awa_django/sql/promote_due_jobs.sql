-- promote_due_jobs: make due scheduled and retryable jobs available, and wake their queues.
-- Parameters: limit (int). Index: awa_job_pending_run_at_idx (run_at) WHERE state IN
--   ('scheduled', 'retryable'). Locking: SKIP LOCKED. The NOTIFY (one per queue, delivered at
--   commit of this autocommit statement) wakes idle workers.
WITH due AS (
    SELECT id
    FROM awa_job
    WHERE state IN ('scheduled', 'retryable')
      AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
),
promoted AS (
    UPDATE awa_job AS j
    SET state = 'available'
    FROM due
    WHERE j.id = due.id
    RETURNING j.queue
)
SELECT q.queue, q.n, pg_notify('awa_jobs', q.queue)
FROM (SELECT queue, count(*) AS n FROM promoted GROUP BY queue) AS q
