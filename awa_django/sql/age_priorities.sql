-- age_priorities: move available jobs that have waited one aging interval up one priority level.
-- Parameters: queue (text), aging (interval), limit (int).
-- Each step moves run_at forward by the interval, so the job waits a full interval again before
-- the next step, and keeps its place among the jobs of its new level.
-- Index: awa_job_available_idx. Locking: SKIP LOCKED (a job being claimed is left alone).
WITH aged AS (
    SELECT id
    FROM awa_job
    WHERE state = 'available'
      AND queue = %(queue)s::varchar
      AND priority > 1
      AND run_at < now() - %(aging)s::interval
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
)
UPDATE awa_job AS j
SET priority = j.priority - 1,
    run_at = j.run_at + %(aging)s::interval
FROM aged
WHERE j.id = aged.id
RETURNING j.id
