-- find_ready_queues: which of the given queues have a due, available job ahead of a lane cursor.
-- Parameters: queues (text[]: the queues a worker serves and is not already claiming from, each
--   named LANES (4) times, once per priority lane), lanes (int[]: the priority of each element),
--   after_run_at (timestamptz[]) and after_id (bigint[]): the (run_at, id) each lane's claims start
--   after (NULL: the lane's front), as in claim_jobs. Jobs behind a cursor are the look-behind's
--   (find_jobs_behind.sql), so this stays a short probe however many dead entries lie before the
--   cursors.
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available': one short
--   index probe per lane (LIMIT 1 stops at the first due row), starting past the lane's cursor; so
--   the cost grows with the number of queues asked about, never with the number of jobs; the
--   state is a literal so the planner can use the partial index. A LATERAL sub-select with
--   ORDER BY and LIMIT, not EXISTS: the planner turned the EXISTS into a hash semi-join over the
--   whole available index, which its statistics say is nearly empty, but which under an old
--   snapshot holds an entry for every job ever claimed (measured: 9 per cent of a steady run's database
--   time, growing with the run). A LIMIT cannot be pulled up into a join, so each lane stays a
--   parameterised index scan.
-- Locking: a plain read, no row locks. It is the worker's backstop to LISTEN/NOTIFY: one query
--   per poll interval for every idle queue together, instead of one claim per queue.
SELECT DISTINCT c.queue
FROM unnest(
    %(queues)s::varchar[], %(lanes)s::int[], %(after_run_at)s::timestamptz[], %(after_id)s::bigint[]
) AS c(queue, lane, after_run_at, after_id)
CROSS JOIN LATERAL (
    SELECT j.id
    FROM awa_job AS j
    WHERE j.state = 'available'
      AND j.queue = c.queue
      AND j.priority = c.lane
      AND j.run_at <= now()
      AND (j.run_at, j.id) > (COALESCE(c.after_run_at, '-infinity'), COALESCE(c.after_id, 0))
    ORDER BY j.run_at, j.id
    LIMIT 1
) AS first_due
