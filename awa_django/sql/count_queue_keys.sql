-- count_queue_keys: one queue's fairness keys with available or running jobs, and how many of each
--   (the admin's keys page: the top keys, and the active keys the share in force is computed over).
-- Parameters: queue (varchar).
-- Index: each branch reads one partial index, index-only where the visibility map allows:
--   awa_job_key_available_idx (queue, fair_key, ...) WHERE state = 'available', and
--   awa_job_key_running_idx (queue, fair_key) WHERE state = 'running'; the state literals are what
--   let the planner choose them. The cost is proportional to the queue's available and running
--   rows; one row comes back per key per state. Locking: none (a plain read).
SELECT 'available' AS state, fair_key, count(*) AS n
FROM awa_job
WHERE state = 'available' AND queue = %(queue)s::varchar
GROUP BY fair_key
UNION ALL
SELECT 'running' AS state, fair_key, count(*) AS n
FROM awa_job
WHERE state = 'running' AND queue = %(queue)s::varchar
GROUP BY fair_key
