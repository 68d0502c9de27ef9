-- claim_jobs: mark up to %(limit)s available, due jobs of one queue running, and return them.
-- Parameters: queue (text), limit (int: never more than the permits the dispatcher holds),
--   deadline (interval or NULL: the queue's deadline, sets deadline_at).
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available'; the state
--   is a literal so the planner can use the partial index.
-- Locking: the CTE locks the picked rows FOR UPDATE SKIP LOCKED, so concurrent workers pick
--   disjoint rows and never wait on each other; it stays a CTE (not a sub-select in FROM), so the
--   planner cannot merge it and ignore the LIMIT. Runs in autocommit: the rows are running and the
--   locks released when the statement ends. A paused queue claims nothing.
-- Each claim starts a new attempt: attempt + 1, and run_lease + 1, which every later write of this
--   attempt must match.
-- Returns the ClaimedJob fields, the last one the seconds the job waited from due (run_at) to this
--   claim, by the database's clock (the wait-time metric).
WITH picked AS (
    SELECT id
    FROM awa_job
    WHERE state = 'available'
      AND queue = %(queue)s::varchar
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM awa_queue WHERE name = %(queue)s::varchar AND paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
)
UPDATE awa_job AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    heartbeat_at = now(),
    deadline_at = now() + %(deadline)s::interval
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.kind, j.queue, j.args, j.attempt, j.max_attempts, j.run_lease, j.priority, j.metadata,
    EXTRACT(EPOCH FROM now() - j.run_at)::float8 AS waited
