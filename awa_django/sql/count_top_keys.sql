-- count_top_keys: per queue and state (available, running), the `top` fairness keys with the most
--   jobs by name, and the rest summed in one row whose key is NULL (awa_health --json and the
--   metrics' key="other"): at most (top + 1) rows per queue and state, however many keys there are.
-- Parameters: top (int, at least 1).
-- Index: the two branches read awa_job_key_available_idx and awa_job_key_running_idx (partial, by
--   their state literals; index-only where the visibility map allows); the ranking runs over the
--   grouped rows (one per queue and key), not over jobs. Locking: none (a plain read).
WITH counts AS (
    SELECT queue, 'available' AS state, fair_key, count(*) AS n
    FROM awa_job
    WHERE state = 'available'
    GROUP BY queue, fair_key
    UNION ALL
    SELECT queue, 'running' AS state, fair_key, count(*) AS n
    FROM awa_job
    WHERE state = 'running'
    GROUP BY queue, fair_key
),
ranked AS (
    SELECT queue, state, fair_key, n, row_number() OVER (PARTITION BY queue, state ORDER BY n DESC, fair_key) AS rank
    FROM counts
)
SELECT queue, state, CASE WHEN rank <= %(top)s::int THEN fair_key END AS fair_key, sum(n)::bigint AS n,
    count(*)::int AS keys
FROM ranked
GROUP BY queue, state, CASE WHEN rank <= %(top)s::int THEN fair_key END
ORDER BY queue, state, n DESC
