-- estimate_unfinished_jobs: the planner's estimate of awa_job's rows not yet finished (available,
-- scheduled, retryable, running, waiting), from the table's statistics: no row is read. The job
-- list's search over every state uses it to decide whether reading those rows (no args or tags
-- index covers them) fits a page (admin/search.py). Parameters: none. No lock.
EXPLAIN (FORMAT JSON)
SELECT 1 FROM awa_job WHERE state IN ('available', 'scheduled', 'retryable', 'running', 'waiting')
