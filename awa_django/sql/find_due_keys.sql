-- find_due_keys: the fair keys of one queue that have a due, available job, each with its first such
--   job in the keyed claim's order, one index descent per key (a loose index scan): a keyed runner's
--   sweep (worker/keyed.py), which finds the keys whose jobs became available where its discovery
--   cursors do not look (behind them: promotions, retries, releases, aged priorities, late commits;
--   and the backlog there before it started), and the jobs behind a key's own cursor.
-- Parameters: queue (text), limit (int: at most this many keys, in key order).
-- Returns: fair_key, priority, run_at, id, in key order.
-- Index: awa_job_key_available_idx (queue, fair_key, priority, run_at, id) WHERE state = 'available':
--   each step descends to the first entry after the last key and walks only that key's entries until
--   a due one (under an old snapshot, a key's dead entries at its front are its cost). It runs off the
--   claim path, spaced by its own duration.
-- Locking: a plain read, no locks.
WITH RECURSIVE keys(fair_key, priority, run_at, id, n) AS (
    (
        SELECT j.fair_key, j.priority, j.run_at, j.id, 1
        FROM awa_job AS j
        WHERE j.state = 'available'
          AND j.queue = %(queue)s::varchar
          AND j.run_at <= now()
        ORDER BY j.fair_key, j.priority, j.run_at, j.id
        LIMIT 1
    )
    UNION ALL
    SELECT f.fair_key, f.priority, f.run_at, f.id, k.n + 1
    FROM keys AS k
    CROSS JOIN LATERAL (
        SELECT j.fair_key, j.priority, j.run_at, j.id
        FROM awa_job AS j
        WHERE j.state = 'available'
          AND j.queue = %(queue)s::varchar
          AND j.fair_key > k.fair_key
          AND j.run_at <= now()
        ORDER BY j.fair_key, j.priority, j.run_at, j.id
        LIMIT 1
    ) AS f
    WHERE k.n < %(limit)s::int
)
SELECT fair_key, priority, run_at, id FROM keys
