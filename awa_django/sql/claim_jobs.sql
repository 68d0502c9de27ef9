-- claim_jobs: mark up to %(limit)s available, due jobs of one queue running, and return them.
-- Parameters: queue (text), limit (int: never more than the permits the dispatcher holds),
--   deadline (interval or NULL: the queue's deadline; a row's own timeout, its kind's @job(timeout=),
--   overrides it in deadline_at), after_run_at_1..4
--   (timestamptz) and after_id_1..4 (bigint): per priority lane 1..4, the (run_at, id) the lane's
--   scan starts after; NULL starts the lane at its front (worker/lanes.py keeps them). Scalars, not
--   two arrays: binding and subscripting arrays cost a claim about a tenth of its time.
--   worker (text): the claiming worker's host:pid, stored as attempted_by (one more constant
--   column in the row the UPDATE writes anyway: "Running now" and the attempt history read it).
-- Order: priority, then run_at, then id. The lanes are the branches of one UNION ALL under one
--   LIMIT: the Append runs them in order and the LIMIT stops pulling rows once it has `limit`, so
--   lane 2 is scanned (and its rows locked) only for what lane 1 left unfilled, and so on; the rows
--   returned are the first `limit` of (priority, run_at, id) among the rows ahead of each cursor.
--   (Four CTEs with LIMITs computed from the counts before them did the same at twice the cost of
--   an idle claim: the pickup latency paid for it.)
-- Why lanes and cursors: a claimed job leaves its old row version's entry in the available index
--   until vacuum removes it, and vacuum cannot while any transaction holds an older snapshot. A
--   scan that starts at a lane's front walks every such entry (a heap visit each); one that starts
--   after the lane's cursor skips them in the btree descent. Jobs that become available behind a
--   cursor (promotions, retries, aging, releases, inserts that commit late) are found by the
--   worker's look-behind (worker/lookbehind.py), which rewinds the lane's cursor to them
--   (docs/storage.md: how often, and why no job is skipped).
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available': per lane
--   `queue =`, `priority =` and the row comparison on (run_at, id) are the scan's bounds; the state
--   is a literal so the planner can use the partial index. The UPDATE finds the picked rows through
--   the primary key (`id = ANY(ARRAY(...))`): joined to the CTEs instead, the planner guessed how
--   many rows lanes 2-4 return (their LIMITs are expressions), sometimes chose a hash join over a
--   sequential scan of awa_job, and under an old snapshot that scan reads every dead version.
-- Locking: each lane's sub-select locks its rows FOR UPDATE SKIP LOCKED as the LIMIT above pulls
--   them, so concurrent workers pick disjoint rows and never wait on each other, and no row is
--   locked that is not claimed. (Postgres refuses FOR UPDATE directly in a UNION branch, hence
--   the sub-selects in FROM; their LIMIT and FOR UPDATE keep the planner from pulling them up.)
--   Runs in autocommit: the rows are running and the locks released when the statement ends. A
--   paused queue claims nothing: the NOT EXISTS is a one-time filter above the Append, checked
--   before any lane is scanned.
-- Each claim starts a new attempt: attempt + 1, and run_lease + 1, which every later write of this
--   attempt must match.
-- Returns the ClaimedJob fields: run_at (where the lane cursor moves to), then the seconds the job
--   waited from due (run_at) to this claim, by the database's clock (the wait-time metric), then
--   the row's timeout in seconds (NULL: the queue's deadline applies), then its fair key (a keyless
--   runner that sees a key other than '' starts sharing its slots by key, worker/keyed.py).
--   Last, in every row, `more`: whether a due, available job is left past the rows claimed (false
--   when the claim came back short). A claim that filled every permit used to leave the runner
--   believing in backlog until its next claim came back empty: with one job per queue (1,000
--   queues sharing 50 weighted slots), every slot then went through one empty claim before passing
--   to another queue. The probe (`ends`, `more`) runs only for a claim that filled its limit: one
--   index probe per lane, lane 1 first, stopping at the first job found, each starting past the
--   lane's last claimed row (or its cursor, for a lane the claim did not reach), so it never walks
--   the dead entries before the cursors either. A job locked by a concurrent claim counts as left
--   (the runner looks again, as before); rows this statement claims lie before each probe's start.
-- Without the probe: statements["claim_jobs_unprobed"] is this text with the CTEs from `ends` to
--   the UPDATE cut out and `more` NULL (awa_django/sql/__init__.py cuts it), for hard-reserved
--   workers (worker/plain.py). The probe's CTEs make `picked` a CTE read three times, which Postgres
--   materializes, and put a sort and a lateral probe in every claim's plan, even one that comes back
--   short, where the probe never runs. An idle queue's pickup paid for them: alternated rounds of 600
--   pickups against 6353f4d (before the probe) read p95 / p99 2.67 / 3.36 ms for 6353f4d, 3.15 /
--   4.35 with the probe, 2.75 / 3.55 without it (bench/README.md, "The pickup tail's cause"). The
--   probe is for the overflow pool: in weighted mode a runner that believes in backlog holds slots
--   away from other queues until a claim comes back empty (1,000 one-job queues sharing 50 slots).
--   In hard-reserved mode a queue's slots are its own: a claim that fills leaves the runner looking
--   again, and the writer's hand-over claim, as a job ends, says whether the queue ran dry.
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
), ends AS (
    SELECT DISTINCT ON (priority) priority, run_at, id FROM picked ORDER BY priority, run_at DESC, id DESC
), more AS (
    SELECT CASE WHEN (SELECT count(*) FROM picked) < %(limit)s::int THEN false ELSE EXISTS (
        SELECT 1
        FROM (VALUES (1, %(after_run_at_1)s::timestamptz, %(after_id_1)s::bigint),
                     (2, %(after_run_at_2)s::timestamptz, %(after_id_2)s::bigint),
                     (3, %(after_run_at_3)s::timestamptz, %(after_id_3)s::bigint),
                     (4, %(after_run_at_4)s::timestamptz, %(after_id_4)s::bigint)) AS lane (priority, run_at, id)
        LEFT JOIN ends USING (priority)
        CROSS JOIN LATERAL (
            SELECT 1 FROM awa_job
            WHERE state = 'available' AND queue = %(queue)s::varchar AND priority = lane.priority
              AND run_at <= now()
              AND (run_at, id) > (COALESCE(ends.run_at, lane.run_at, '-infinity'), COALESCE(ends.id, lane.id, 0))
            ORDER BY run_at, id
            LIMIT 1
        ) AS ahead
    ) END AS more
)
UPDATE awa_job AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    attempted_by = %(worker)s::varchar,
    heartbeat_at = now(),
    -- A row's timeout is capped to 0..100 years as read: a longer one (written past @job's checks,
    -- by SQL) put deadline_at past timestamp's range and failed the claim of the whole queue.
    deadline_at = now() + COALESCE((CASE WHEN j.timeout IS NOT NULL THEN GREATEST(LEAST(j.timeout, interval '100 years'), interval '0') END), %(deadline)s::interval)
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.kind, j.queue, j.args, j.attempt, j.max_attempts, j.run_lease, j.priority, j.metadata, j.run_at,
    EXTRACT(EPOCH FROM now() - j.run_at)::float8 AS waited, EXTRACT(EPOCH FROM (CASE WHEN j.timeout IS NOT NULL THEN GREATEST(LEAST(j.timeout, interval '100 years'), interval '0') END))::float8 AS timeout, j.fair_key, j.workflow_id,
    (SELECT more FROM more) AS more
