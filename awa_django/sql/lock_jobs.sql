-- lock_jobs: lock the jobs among ids that are in one of the given states, and return them
-- (id, queue, state) in id order, for the admin's and the services' actions (cancel, retry, delete).
-- Parameters: ids (bigint[]), states (text[]).
-- Storage (migration 0023): a job is in awa_job (waiting or running, or finished and keeping its
--   unique key) or in awa_job_done (finished); the view awa_job_all cannot be locked (a UNION), so
--   each table's rows are locked by their own arm, each in id order.
-- Index: the primary key of awa_job, awa_job_done_id_idx in each finished partition.
SELECT id, queue, state
FROM (
    SELECT * FROM (SELECT id, queue, state FROM awa_job
     WHERE id = ANY(%(ids)s::bigint[]) AND state = ANY(%(states)s::varchar[])
     ORDER BY id
     FOR UPDATE) AS hot
    UNION ALL
    SELECT * FROM (SELECT id, queue, state FROM awa_job_done
     WHERE id = ANY(%(ids)s::bigint[]) AND state = ANY(%(states)s::varchar[])
     ORDER BY id
     FOR UPDATE) AS done
) AS locked
ORDER BY id
