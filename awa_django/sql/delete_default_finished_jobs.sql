-- delete_default_finished_jobs: retention's sweep of the DEFAULT partitions of awa_job_done: the
-- jobs that finished where no range partition existed (before the leader first created them, or
-- while no leader ran). One batch of each branch, finalised before its cutoff, with their in-edges
-- and the workflow rows left without a job, as delete_finished_jobs does for the hot table.
-- Parameters: completed_older_than, failed_older_than (interval), limit (int). Returns one row per
-- deleted job. Index: awa_job_done_finalized_id_idx in each default partition.
-- Locking: SKIP LOCKED on the jobs; the caller loops until a batch comes back short.
WITH old_completed AS (
    SELECT id FROM awa_job_done_completed_default
    WHERE finalized_at < now() - %(completed_older_than)s::interval
    ORDER BY finalized_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), old_failed AS (
    SELECT id FROM awa_job_done_failed_default
    WHERE finalized_at < now() - %(failed_older_than)s::interval
    ORDER BY finalized_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), gone_completed AS (
    DELETE FROM awa_job_done_completed_default AS j
    USING old_completed AS o
    WHERE j.id = o.id
    RETURNING j.id, j.workflow_id
), gone_failed AS (
    DELETE FROM awa_job_done_failed_default AS j
    USING old_failed AS o
    WHERE j.id = o.id
    RETURNING j.id, j.workflow_id
), gone AS (
    SELECT id, workflow_id FROM gone_completed
    UNION ALL
    SELECT id, workflow_id FROM gone_failed
), edges AS (
    DELETE FROM awa_job_edge AS e
    WHERE e.downstream_id = ANY(ARRAY(SELECT id FROM gone WHERE workflow_id IS NOT NULL))
), flows AS (
    DELETE FROM awa_workflow AS w
    WHERE w.id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM gone WHERE workflow_id IS NOT NULL))
      AND NOT EXISTS (
          SELECT 1 FROM awa_job_all AS j
          WHERE j.workflow_id = w.id AND j.id <> ALL(ARRAY(SELECT id FROM gone))
      )
)
SELECT gone.id FROM gone
