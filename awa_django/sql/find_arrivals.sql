-- find_arrivals: the next due, available jobs of one queue past its discovery cursors, with their
--   fair keys: how a keyed runner learns which keys have due jobs (worker/keyed.py), reading each
--   job that becomes available once, in arrival order, whatever the number of keys.
-- Parameters: queue (text), limit (int: at most this many rows), after_run_at_1..4 (timestamptz) and
--   after_id_1..4 (bigint): per priority lane, the (run_at, id) the lane's read starts after (NULL:
--   the lane's front), exactly claim_jobs' lane parameters (worker/lanes.py keeps them).
-- Order: claim_jobs' own: the lanes under one LIMIT, in (priority, run_at, id) order, so the lane
--   cursors advance over these rows as over a claim's.
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available', bounded per
--   lane by the cursor: dead entries behind the cursors (claimed jobs, kept while an old snapshot
--   holds vacuum back) are never walked. fair_key is read from the heap row.
-- Locking: a plain read, no row locks; the keyed claim (claim_keyed_jobs) decides who takes a job.
SELECT id, priority, run_at, fair_key FROM (
        SELECT id, priority, run_at, fair_key FROM (
            SELECT id, priority, run_at, fair_key
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 1
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_1)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_1)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
        ) AS lane1
        UNION ALL
        SELECT id, priority, run_at, fair_key FROM (
            SELECT id, priority, run_at, fair_key
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 2
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_2)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_2)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
        ) AS lane2
        UNION ALL
        SELECT id, priority, run_at, fair_key FROM (
            SELECT id, priority, run_at, fair_key
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 3
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_3)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_3)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
        ) AS lane3
        UNION ALL
        SELECT id, priority, run_at, fair_key FROM (
            SELECT id, priority, run_at, fair_key
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 4
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_4)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_4)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
        ) AS lane4
        LIMIT %(limit)s::int
) AS lanes
