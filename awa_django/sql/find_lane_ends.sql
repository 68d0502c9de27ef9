-- find_lane_ends: per priority lane of one queue, the last due, available job in (run_at, id) order:
--   where a keyed runner's discovery cursors start (worker/keyed.py), since the jobs before them
--   are found key by key (find_due_keys), not one by one.
-- Parameters: queue (text).
-- Returns: priority, run_at, id; one row per lane that has a due, available job.
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available': per lane a
--   backward scan from now() that stops at the first live entry.
-- Locking: a plain read, no locks.
SELECT l.priority, e.run_at, e.id
FROM generate_series(1, 4) AS l(priority)
CROSS JOIN LATERAL (
    SELECT j.run_at, j.id
    FROM awa_job AS j
    WHERE j.state = 'available'
      AND j.queue = %(queue)s::varchar
      AND j.priority = l.priority
      AND j.run_at <= now()
    ORDER BY j.run_at DESC, j.id DESC
    LIMIT 1
) AS e
