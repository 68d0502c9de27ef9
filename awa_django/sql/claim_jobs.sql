-- claim_jobs: mark up to %(limit)s available, due jobs of one queue running, and return them.
-- Parameters: queue (text), limit (int: never more than the permits the dispatcher holds),
--   deadline (interval or NULL: the queue's deadline, sets deadline_at), after_run_at
--   (timestamptz[4]) and after_id (bigint[4]): per priority lane 1..4, the (run_at, id) the lane's
--   scan starts after; NULL elements start the lane at its front (worker/lanes.py keeps them).
-- Order: priority, then run_at, then id. Lane 1 is scanned first; each next lane only for the rows
--   the lanes before it left unfilled (its LIMIT subtracts what they locked), so the rows returned
--   are the first `limit` of (priority, run_at, id) among the rows ahead of each lane's cursor.
-- Why lanes and cursors: a claimed job leaves its old row version's entry in the available index
--   until vacuum removes it, and vacuum cannot while any transaction holds an older snapshot. A
--   scan that starts at a lane's front walks every such entry (a heap visit each); one that starts
--   after the lane's cursor skips them in the btree descent. Jobs that become available behind a
--   cursor (promotions, retries, aging, releases, inserts that commit late) are found when the
--   worker rescans the lane from its front (docs/storage.md: how often, and why no job is skipped).
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available': per lane
--   `queue =`, `priority =` and the row comparison on (run_at, id) are the scan's bounds; the state
--   is a literal so the planner can use the partial index. The UPDATE finds the picked rows through
--   the primary key (`id = ANY(ARRAY(...))`): joined to the CTEs instead, the planner guessed how
--   many rows lanes 2-4 return (their LIMITs are expressions), sometimes chose a hash join over a
--   sequential scan of awa_job, and under an old snapshot that scan reads every dead version.
-- Locking: each lane CTE locks its rows FOR UPDATE SKIP LOCKED, so concurrent workers pick disjoint
--   rows and never wait on each other; they stay CTEs (not sub-selects in FROM), so the planner
--   cannot merge them and ignore their LIMITs. Runs in autocommit: the rows are running and the
--   locks released when the statement ends. A paused queue claims nothing.
-- Each claim starts a new attempt: attempt + 1, and run_lease + 1, which every later write of this
--   attempt must match.
-- Returns the ClaimedJob fields: run_at (where the lane cursor moves to), then the seconds the job
--   waited from due (run_at) to this claim, by the database's clock (the wait-time metric).
WITH open AS (
    SELECT NOT EXISTS (SELECT 1 FROM awa_queue WHERE name = %(queue)s::varchar AND paused) AS claims
),
lane1 AS (
    SELECT id
    FROM awa_job
    WHERE state = 'available'
      AND queue = %(queue)s::varchar
      AND priority = 1
      AND run_at <= now()
      AND (run_at, id) > (COALESCE((%(after_run_at)s::timestamptz[])[1], '-infinity'),
                          COALESCE((%(after_id)s::bigint[])[1], 0))
      AND (SELECT claims FROM open)
    ORDER BY run_at, id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
),
lane2 AS (
    SELECT id
    FROM awa_job
    WHERE state = 'available'
      AND queue = %(queue)s::varchar
      AND priority = 2
      AND run_at <= now()
      AND (run_at, id) > (COALESCE((%(after_run_at)s::timestamptz[])[2], '-infinity'),
                          COALESCE((%(after_id)s::bigint[])[2], 0))
      AND (SELECT claims FROM open)
    ORDER BY run_at, id
    LIMIT greatest(%(limit)s::int - (SELECT count(*) FROM lane1), 0)
    FOR UPDATE SKIP LOCKED
),
lane3 AS (
    SELECT id
    FROM awa_job
    WHERE state = 'available'
      AND queue = %(queue)s::varchar
      AND priority = 3
      AND run_at <= now()
      AND (run_at, id) > (COALESCE((%(after_run_at)s::timestamptz[])[3], '-infinity'),
                          COALESCE((%(after_id)s::bigint[])[3], 0))
      AND (SELECT claims FROM open)
    ORDER BY run_at, id
    LIMIT greatest(%(limit)s::int - (SELECT count(*) FROM lane1) - (SELECT count(*) FROM lane2), 0)
    FOR UPDATE SKIP LOCKED
),
lane4 AS (
    SELECT id
    FROM awa_job
    WHERE state = 'available'
      AND queue = %(queue)s::varchar
      AND priority = 4
      AND run_at <= now()
      AND (run_at, id) > (COALESCE((%(after_run_at)s::timestamptz[])[4], '-infinity'),
                          COALESCE((%(after_id)s::bigint[])[4], 0))
      AND (SELECT claims FROM open)
    ORDER BY run_at, id
    LIMIT greatest(
        %(limit)s::int - (SELECT count(*) FROM lane1) - (SELECT count(*) FROM lane2) - (SELECT count(*) FROM lane3),
        0
    )
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT id FROM lane1
    UNION ALL
    SELECT id FROM lane2
    UNION ALL
    SELECT id FROM lane3
    UNION ALL
    SELECT id FROM lane4
)
UPDATE awa_job AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    heartbeat_at = now(),
    deadline_at = now() + %(deadline)s::interval
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.kind, j.queue, j.args, j.attempt, j.max_attempts, j.run_lease, j.priority, j.metadata, j.run_at,
    EXTRACT(EPOCH FROM now() - j.run_at)::float8 AS waited
