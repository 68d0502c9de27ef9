-- lock_signalled_job: the first statement of Job.objects.signal: lock the job's hot row, so that a
-- worker parking it waits for the signal's transaction (and then sees its event: see
-- wake_signalled_jobs), or the signal waits for the park (and then wakes it: signal_job).
-- Parameters: id (bigint). Returns the job's state, or no row when the job is not in the hot table
--   (finished, or never was: the caller reads awa_job_all to say which).
-- Index: the primary key. Locking: FOR NO KEY UPDATE on one row, held to the caller's commit (a
--   claim or heartbeat of that job waits that long; two signals to one job queue up).
SELECT state FROM awa_job WHERE id = %(id)s::bigint FOR NO KEY UPDATE
