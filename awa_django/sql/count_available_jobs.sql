-- count_available_jobs: available jobs per queue, for health snapshots.
-- Parameters: queues (text[]). Index: awa_job_available_idx (index-only where visible).
SELECT queue, count(*)
FROM awa_job
WHERE state = 'available'
  AND queue = ANY(%(queues)s::varchar[])
GROUP BY queue
