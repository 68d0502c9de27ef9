-- find_ready_queues: which of the given queues have at least one available, due job.
-- Parameters: queues (text[]: the queues a worker serves and is not already claiming from).
-- Index: awa_job_available_idx (queue, priority, run_at, id) WHERE state = 'available': one
--   short index probe per queue (EXISTS stops at the first due row), so the cost grows with the
--   number of queues asked about, never with the number of jobs; the state is a literal so the
--   planner can use the partial index.
-- Locking: a plain read, no row locks. It is the worker's backstop to LISTEN/NOTIFY: one query
--   per poll interval for every idle queue together, instead of one claim per queue.
SELECT q.name
FROM unnest(%(queues)s::varchar[]) AS q(name)
WHERE EXISTS (
    SELECT 1
    FROM awa_job AS j
    WHERE j.state = 'available'
      AND j.queue = q.name
      AND j.run_at <= now()
)
