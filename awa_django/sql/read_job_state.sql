-- read_job_state: one job's state (immediate mode: is a step it could not claim still waiting?).
-- Parameters: id (bigint). Index: the primary key. Locking: none (a plain read).
SELECT state FROM awa_job WHERE id = %(id)s::bigint
