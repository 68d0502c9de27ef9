-- read_job_outcome: what a waiter needs of a job: its state, result and last error's text.
-- Parameters: id (bigint). Index: the primary key. Locking: none (a plain read).
-- Storage (migration 0023): awa_job_all, the view of the hot and the finished jobs.
SELECT state, result, errors -> -1 ->> 'error' AS error
FROM awa_job_all
WHERE id = %(id)s::bigint
