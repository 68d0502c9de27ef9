-- find_job_keys: fair keys that have jobs now, for the Job list's fair key filter: at most `limit`
--   distinct (queue, fair_key) pairs among available jobs and as many among running jobs, in
--   (queue, fair_key) order, so a key with jobs is offered whether or not an override row names it.
-- Parameters: limit (int, at least 1: pairs per state).
-- Returns: fair_key (one row per pair: a key in several queues comes back once per queue).
-- Index: a loose index scan of each partial index, one descent per pair: awa_job_key_available_idx
--   (queue, fair_key, ...) WHERE state = 'available' and awa_job_key_running_idx (queue, fair_key)
--   WHERE state = 'running'. The cost is bounded by `limit`, however many jobs each key has (only a
--   key's dead entries, under an old snapshot, are walked past). Locking: a plain read, no locks.
WITH RECURSIVE available(queue, fair_key, n) AS (
    (
        SELECT j.queue, j.fair_key, 1
        FROM awa_job AS j
        WHERE j.state = 'available'
        ORDER BY j.queue, j.fair_key
        LIMIT 1
    )
    UNION ALL
    SELECT f.queue, f.fair_key, a.n + 1
    FROM available AS a
    CROSS JOIN LATERAL (
        SELECT j.queue, j.fair_key
        FROM awa_job AS j
        WHERE j.state = 'available' AND (j.queue, j.fair_key) > (a.queue, a.fair_key)
        ORDER BY j.queue, j.fair_key
        LIMIT 1
    ) AS f
    WHERE a.n < %(limit)s::int
), running(queue, fair_key, n) AS (
    (
        SELECT j.queue, j.fair_key, 1
        FROM awa_job AS j
        WHERE j.state = 'running'
        ORDER BY j.queue, j.fair_key
        LIMIT 1
    )
    UNION ALL
    SELECT f.queue, f.fair_key, r.n + 1
    FROM running AS r
    CROSS JOIN LATERAL (
        SELECT j.queue, j.fair_key
        FROM awa_job AS j
        WHERE j.state = 'running' AND (j.queue, j.fair_key) > (r.queue, r.fair_key)
        ORDER BY j.queue, j.fair_key
        LIMIT 1
    ) AS f
    WHERE r.n < %(limit)s::int
)
SELECT fair_key FROM available
UNION ALL
SELECT fair_key FROM running
