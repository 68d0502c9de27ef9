-- read_job_state: one job's state (immediate mode: is a step it could not claim still waiting?).
-- Parameters: id (bigint). Index: the primary key. Locking: none (a plain read).
-- Storage (migration 0023): awa_job_all, the view of the hot and the finished jobs.
SELECT state FROM awa_job_all WHERE id = %(id)s::bigint
