-- end_job_wait: a durable job's wait reached its deadline with no event: it ends, timed out, so
-- that every later attempt sees the same (awa_django.durable raises WaitTimeout).
-- Parameters: job (bigint), name (text). Returns one row if it ended the wait, none if it had
--   ended already (taken an event meanwhile: the caller reads the steps again).
-- Index: awa_job_step's primary key.
UPDATE awa_job_step
SET finished_at = clock_timestamp(), timed_out = true
WHERE job_id = %(job)s::bigint AND name = %(name)s::varchar AND finished_at IS NULL
RETURNING timed_out
