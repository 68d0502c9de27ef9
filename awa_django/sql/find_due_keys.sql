-- find_due_keys: the fair keys of one queue that have a due, available job, one index descent per
--   key (a loose index scan): a keyed runner's sweep (worker/keyed.py), which finds the keys whose
--   jobs became available where its discovery cursors do not look (behind them: promotions,
--   retries, releases, aged priorities, late commits; and the backlog there before it started).
-- Parameters: queue (text), limit (int: at most this many keys, in key order).
-- Returns: fair_key, in key order.
-- Index: awa_job_key_available_idx (queue, fair_key, priority, run_at, id) WHERE state = 'available':
--   each step descends to the first entry after the last key and walks only that key's entries
--   until a due one (under an old snapshot a key's dead entries are its cost). It runs off the claim
--   path, spaced by its own duration.
-- Locking: a plain read, no locks.
WITH RECURSIVE keys(fair_key, n) AS (
    (
        SELECT j.fair_key, 1
        FROM awa_job AS j
        WHERE j.state = 'available'
          AND j.queue = %(queue)s::varchar
          AND j.run_at <= now()
        ORDER BY j.fair_key
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT j.fair_key
        FROM awa_job AS j
        WHERE j.state = 'available'
          AND j.queue = %(queue)s::varchar
          AND j.fair_key > k.fair_key
          AND j.run_at <= now()
        ORDER BY j.fair_key
        LIMIT 1
    ), k.n + 1
    FROM keys AS k
    WHERE k.fair_key IS NOT NULL AND k.n < %(limit)s::int
)
SELECT fair_key FROM keys WHERE fair_key IS NOT NULL
