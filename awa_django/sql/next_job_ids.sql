-- next_job_ids: ids for a workflow's new jobs, taken from awa_job's own sequence in one round trip,
--   so the jobs and their edges can be written with COPY right after (Workflow.enqueue).
-- Parameters: count (int). Returns count ids, ascending. Locking: none (a sequence is not
--   transactional: ids of a rolled-back call are skipped, as for any insert).
-- The sequence is looked up once (the MATERIALIZED CTE): in the select list pg_get_serial_sequence
--   would run per row, a catalog lookup each, 7x the cost of the nextval calls themselves.
WITH s AS MATERIALIZED (
    SELECT pg_get_serial_sequence('awa_job', 'id')::regclass AS seq
)
SELECT nextval(s.seq) AS id
FROM s, generate_series(1, %(count)s::int)
ORDER BY 1
