-- delete_finished_jobs: retention's sweep of the finished jobs left in the hot table (a unique job
-- that keeps its key past its end, a job finished before migration 0023: the rest are in
-- awa_job_done, whose partitions are dropped whole); delete one batch of jobs of one finished
-- state finalised before the cutoff, with their in-edges (awa_job_edge rows whose downstream they are), and the workflow
-- rows left without a job. Parameters: state (text: completed, failed or cancelled), older_than
-- (interval), limit (int). Returns one row per deleted job (the caller counts rowcount).
-- Index: awa_job_finalized_idx (state, finalized_at), in its order: with ORDER BY the plan reads the
--   index from the oldest entry and stops at the cutoff or the limit, whatever the estimates (without
--   it a table of millions of finished rows from before migration 0023 planned a sequential scan); awa_job_edge_downstream_idx; awa_job_workflow_idx.
-- Edges: a finished job's out-edges were consumed when it ended; each goes with its downstream's
--   deletion (its in-edge then), so a job still alive keeps the edge naming an upstream that is gone
--   (context.upstreams() reports it with no state) and no edge outlives both ends.
-- Workflows: the CTEs share one snapshot, so "no job left" excludes this batch's ids explicitly.
-- Locking: SKIP LOCKED on the jobs; the caller loops until a batch comes back short.
WITH old AS (
    SELECT id
    FROM awa_job
    WHERE state IN ('completed', 'failed', 'cancelled')
      AND state = %(state)s::varchar
      AND finalized_at < now() - %(older_than)s::interval
    ORDER BY finalized_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM awa_job AS j
    USING old
    WHERE j.id = old.id
    RETURNING j.id, j.workflow_id
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
