-- read_job_outcome: what a waiter needs of a job: its state, result and last error's text.
-- Parameters: id (bigint). Index: the primary key. Locking: none (a plain read).
SELECT state, result, errors -> -1 ->> 'error' AS error
FROM awa_job
WHERE id = %(id)s::bigint
