-- next_job_ids: ids for a workflow's new jobs, taken from awa_job's own sequence in one round trip,
--   so the jobs and their edges can be written with COPY right after (Workflow.enqueue).
-- Parameters: count (int). Returns count ids, ascending. Locking: none (a sequence is not
--   transactional: ids of a rolled-back call are skipped, as for any insert).
SELECT nextval(pg_get_serial_sequence('awa_job', 'id')) AS id
FROM generate_series(1, %(count)s::int)
ORDER BY 1
