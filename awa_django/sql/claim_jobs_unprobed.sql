-- claim_jobs_unprobed: claim_jobs without its `more` probe, for a hard-reserved worker's claims.
-- Parameters and rows: claim_jobs' (read claim_jobs.sql for the lanes, cursors, order, locking and
--   index); `more` is NULL in every row (unknown).
-- Why a second statement: the probe's CTEs (`ends`, `more`) make `picked` a CTE read three times,
--   so Postgres materializes it, and add a sort and a lateral probe to every claim's plan, even one
--   that comes back short, where the probe never runs. An idle queue's pickup paid for them: four
--   alternated rounds of 600 pickups against 6353f4d (before the probe) read pickup p95 / p99
--   2.67 / 3.36 ms for 6353f4d, 3.15 / 4.35 with the probe, 2.75 / 3.55 without it (bench/README.md,
--   "The pickup tail's cause"). The probe is for the overflow pool (worker/plain.py): in weighted
--   mode a runner that believes in backlog holds slots away from other queues until a claim comes
--   back empty (1,000 one-job queues sharing 50 slots), so weighted workers keep claim_jobs. In
--   hard-reserved mode a queue's slots are its own: a claim that fills leaves the runner looking
--   again, and the writer's hand-over claim, as a job ends, says whether the queue ran dry.
--   tests/worker/test_claim_rows.py checks that this text is claim_jobs' but for the probe.
WITH picked AS (
    SELECT id, priority, run_at FROM (
        SELECT * FROM (
            SELECT id, priority, run_at
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 1
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_1)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_1)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
            FOR UPDATE SKIP LOCKED
        ) AS lane1
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, run_at
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 2
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_2)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_2)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
            FOR UPDATE SKIP LOCKED
        ) AS lane2
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, run_at
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 3
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_3)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_3)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
            FOR UPDATE SKIP LOCKED
        ) AS lane3
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, run_at
            FROM awa_job
            WHERE state = 'available'
              AND queue = %(queue)s::varchar
              AND priority = 4
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(%(after_run_at_4)s::timestamptz, '-infinity'),
                                  COALESCE(%(after_id_4)s::bigint, 0))
            ORDER BY run_at, id
            LIMIT %(limit)s::int
            FOR UPDATE SKIP LOCKED
        ) AS lane4
        LIMIT %(limit)s::int
    ) AS lanes
    WHERE NOT EXISTS (SELECT 1 FROM awa_queue WHERE name = %(queue)s::varchar AND paused)
)
UPDATE awa_job AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    attempted_by = %(worker)s::varchar,
    heartbeat_at = now(),
    deadline_at = now() + COALESCE(j.timeout, %(deadline)s::interval)
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.kind, j.queue, j.args, j.attempt, j.max_attempts, j.run_lease, j.priority, j.metadata, j.run_at,
    EXTRACT(EPOCH FROM now() - j.run_at)::float8 AS waited, EXTRACT(EPOCH FROM j.timeout)::float8 AS timeout, j.fair_key, j.workflow_id,
    NULL::boolean AS more
