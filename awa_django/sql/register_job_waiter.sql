-- register_job_waiter: a waiter (awa_django.workflows.waiting) asks to be told when a job ends:
--   awa_release_jobs NOTIFYs awa_done with the job id for registered jobs only.
-- Parameters: id (bigint), token (text: this waiter's, so several may await one job).
-- Autocommit, on the waiter's own connection: the ending statement must see the row.
-- Locking: none. awa_job_waiter is unlogged (lost on a crash: waiters then re-read by polling).
INSERT INTO awa_job_waiter (job_id, token) VALUES (%(id)s::bigint, %(token)s::text)
ON CONFLICT DO NOTHING
