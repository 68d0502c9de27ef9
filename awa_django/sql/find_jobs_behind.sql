-- find_jobs_behind: for each (queue, priority lane) given, the first due, available job behind the
--   lane's cursor, if any (the look-behind, worker/lookbehind.py; why cursors: worker/lanes.py).
-- Parameters: queues (text[]), lanes (int[]: priorities 1..4), before_run_at (timestamptz[]) and
--   before_id (bigint[]): element i asks about lane lanes[i] of queue queues[i], whose claims start
--   after (before_run_at[i], before_id[i]); window (interval or NULL): look only at jobs due at most
--   this long before each lane's cursor (NULL: from the lanes' fronts).
-- Returns: queue, priority, run_at, id of the first such job in (run_at, id) order, one row per
--   lane that has one.
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available': per lane an
--   index scan from the lane's front (or from `window` before the cursor) that stops at the first live due entry or at
--   the cursor. It walks the dead entries vacuum could not remove yet in that range (that is its
--   cost under an old snapshot, and why it runs off the claim path, spaced by its own duration);
--   the state is a literal so the planner can use the partial index.
-- Locking: a plain read, no row locks; the claim that follows decides who takes the job.
SELECT c.queue, c.lane, b.run_at, b.id
FROM unnest(
    %(queues)s::varchar[], %(lanes)s::int[], %(before_run_at)s::timestamptz[], %(before_id)s::bigint[]
) AS c(queue, lane, before_run_at, before_id)
CROSS JOIN LATERAL (
    SELECT j.run_at, j.id
    FROM awa_job AS j
    WHERE j.state = 'available'
      AND j.queue = c.queue
      AND j.priority = c.lane
      AND j.run_at <= now()
      AND j.run_at >= COALESCE(c.before_run_at - %(window)s::interval, '-infinity')
      AND (j.run_at, j.id) < (c.before_run_at, c.before_id)
    ORDER BY j.run_at, j.id
    LIMIT 1
) AS b
