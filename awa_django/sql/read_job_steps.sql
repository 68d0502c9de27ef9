-- read_job_steps: a durable job's stored steps, read once per attempt at its first step, sleep or
-- wait (awa_django.durable). Parameters: job (bigint). Returns one row per step, and the
-- database clock (clock_timestamp(): in an atomic handler's transaction now() is its start) and
-- now() (the clock a park written in this transaction counts its delay from), with one row of
-- NULL step columns when the job has none.
-- Index: awa_job_step's primary key (job_id, name). Locking: none (a plain read).
SELECT s.name, s.kind, s.result, s.finished_at, s.wake_at, s.timed_out, s.event, clock_timestamp() AS now, now() AS since
FROM (SELECT 1) AS one
LEFT JOIN awa_job_step AS s ON s.job_id = %(job)s::bigint
