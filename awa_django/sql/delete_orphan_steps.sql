-- delete_orphan_steps: the leader's retention sweep of durable jobs' records: delete the steps and
-- events of jobs that exist no more (retention dropped their partition of awa_job_done, or deleted
-- their row), walking awa_job_step and awa_job_event by job id from a cursor, a bounded batch at a time.
-- Parameters: after (bigint: the cursor, 0 to start), limit (int: job ids looked at).
-- Returns one row: the highest job id looked at (NULL when none was past the cursor), how many
--   job ids were looked at (fewer than `limit`: the walk reached the end, start over), and the step
--   and event rows deleted.
-- Index: awa_job_step's primary key (job_id, name) and awa_job_event_job_idx (job_id, …) for the
--   walk; per job id, awa_job's primary key and each awa_job_done partition's (id) index, one probe
--   each. No scan of a history partition: the cost is `limit` probes per table. The probes are
--   scalar subqueries with LIMIT 1, not NOT EXISTS, so the planner cannot turn them into a hash
--   anti-join that reads a whole partition.
WITH ids AS (
    SELECT job_id FROM (
        (SELECT DISTINCT job_id FROM awa_job_step WHERE job_id > %(after)s::bigint ORDER BY job_id LIMIT %(limit)s::int)
        UNION
        (SELECT DISTINCT job_id FROM awa_job_event WHERE job_id > %(after)s::bigint ORDER BY job_id LIMIT %(limit)s::int)
    ) AS u
    ORDER BY job_id
    LIMIT %(limit)s::int
), gone AS (
    SELECT ids.job_id FROM ids
    WHERE (SELECT 1 FROM awa_job AS j WHERE j.id = ids.job_id LIMIT 1) IS NULL
      AND (SELECT 1 FROM awa_job_done AS d WHERE d.id = ids.job_id LIMIT 1) IS NULL
), steps AS (
    DELETE FROM awa_job_step AS s USING gone WHERE s.job_id = gone.job_id RETURNING 1
), events AS (
    DELETE FROM awa_job_event AS e USING gone WHERE e.job_id = gone.job_id RETURNING 1
)
SELECT (SELECT max(job_id) FROM ids), (SELECT count(*) FROM ids), (SELECT count(*) FROM steps),
       (SELECT count(*) FROM events)
