-- read_refused_jobs: the rows whose finalising write the (id, running, run_lease) guard refused, as
-- they are now, so the worker can say why: cancelled or deleted while running (an operator's
-- action: the outcome is discarded), handed back at shutdown, or rescued under a newer lease (the
-- outcome is lost). Runs only when a write was refused, never on the normal path.
-- Parameters: ids (bigint[]). Index: the primary key, one probe per id.
-- Locking: none; a plain read in autocommit.
-- Storage (migration 0023): awa_job_all, the view of the hot and the finished jobs.
SELECT id, state, run_lease
FROM awa_job_all
WHERE id = ANY(%(ids)s::bigint[])
