-- count_queue_jobs: each queue's jobs by state (available, scheduled, retryable, running, failed)
-- and its oldest available run_at, for the dashboard, the queue list and awa_health
-- (services/stats.job_counts). Rows: (queue, state, n, oldest); a state a queue has no job in
-- gives no row or n = 0.
-- Parameters: queues (text[], NULL: every queue that has jobs in one of these states), lim (int,
-- NULL: exact; else each (queue, state) count stops at lim rows, read as "at least lim"),
-- pmin and pmax (the priority range).
-- Shape: per state, the queues that have such jobs are found by a loose index scan (one index
-- descent per queue: min(queue) past the last one), and each (queue, state) is counted with an
-- index-only scan of that state's partial index, which has the queue first:
--   available: awa_job_available_idx (queue, priority, run_at, id); its oldest run_at is one
--     descent per priority, never a read of the backlog;
--   scheduled, retryable: awa_job_pending_queue_idx (queue, state);
--   running: awa_job_key_running_idx (queue, fair_key);
--   failed: awa_job_all (migration 0023): the failed jobs left hot (awa_job_finalized_idx) and the
--   failed partitions of awa_job_done (awa_job_done_failed_queue_idx (queue) WHERE failed,
--   migration 0026: through (queue, id) the planner read a bitmap of every failed and cancelled
--   job of the queue before the count's limit could stop it).
-- So the cost is the rows counted, at most lim per (queue, state) with a limit: the console's
-- pages stay cheap on a table of any size. Completed and cancelled rows are never read. No lock.
WITH RECURSIVE
available_queues(queue) AS (
    SELECT min(queue) FROM awa_job WHERE state = 'available'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM awa_job j WHERE j.state = 'available' AND j.queue > q.queue)
    FROM available_queues q WHERE q.queue IS NOT NULL
),
pending_queues(queue) AS (
    SELECT min(queue) FROM awa_job WHERE state IN ('scheduled', 'retryable')
    UNION ALL
    SELECT (SELECT min(j.queue) FROM awa_job j WHERE j.state IN ('scheduled', 'retryable') AND j.queue > q.queue)
    FROM pending_queues q WHERE q.queue IS NOT NULL
),
running_queues(queue) AS (
    SELECT min(queue) FROM awa_job WHERE state = 'running'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM awa_job j WHERE j.state = 'running' AND j.queue > q.queue)
    FROM running_queues q WHERE q.queue IS NOT NULL
),
failed_queues(queue) AS (
    SELECT min(queue) FROM awa_job_all WHERE state = 'failed'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM awa_job_all j WHERE j.state = 'failed' AND j.queue > q.queue)
    FROM failed_queues q WHERE q.queue IS NOT NULL
)
SELECT q.queue, 'available' AS state,
       (SELECT count(*) FROM (SELECT 1 FROM awa_job j
                              WHERE j.state = 'available' AND j.queue = q.queue LIMIT %(lim)s::int) c) AS n,
       (SELECT min(o.run_at)
        FROM generate_series(%(pmin)s::int, %(pmax)s::int) AS p(priority),
        LATERAL (SELECT j.run_at FROM awa_job j
                 WHERE j.state = 'available' AND j.queue = q.queue AND j.priority = p.priority
                 ORDER BY j.run_at LIMIT 1) o) AS oldest
FROM available_queues q
WHERE q.queue IS NOT NULL AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
UNION ALL
SELECT q.queue, s.state,
       (SELECT count(*) FROM (SELECT 1 FROM awa_job j
                              WHERE j.state IN ('scheduled', 'retryable') AND j.state = s.state AND j.queue = q.queue
                              LIMIT %(lim)s::int) c),
       NULL
FROM pending_queues q, (VALUES ('scheduled'), ('retryable')) AS s(state)
WHERE q.queue IS NOT NULL AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
UNION ALL
SELECT q.queue, 'running',
       (SELECT count(*) FROM (SELECT 1 FROM awa_job j
                              WHERE j.state = 'running' AND j.queue = q.queue LIMIT %(lim)s::int) c),
       NULL
FROM running_queues q
WHERE q.queue IS NOT NULL AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
UNION ALL
SELECT q.queue, 'failed',
       (SELECT count(*) FROM (SELECT 1 FROM awa_job_all j
                              WHERE j.state = 'failed' AND j.queue = q.queue LIMIT %(lim)s::int) c),
       NULL
FROM failed_queues q
WHERE q.queue IS NOT NULL AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
