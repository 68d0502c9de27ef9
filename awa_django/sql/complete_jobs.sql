-- complete_jobs: end a batch of running jobs completed (the hot path of finalisation).
-- Parameters: ids (bigint[]), leases (bigint[]): the run_lease each attempt was claimed with.
-- Guard: a row is written only while it is still running under that lease, so a worker whose job
--   was rescued (and perhaps re-claimed) cannot overwrite the newer attempt. RETURNING tells the
--   caller which rows it really finalised. Locking: row locks on the deleted rows only.
-- Storage (migration 0023): a completed job leaves the hot table awa_job for awa_job_done (the
--   partition of its finish time), in this statement: deleted here, inserted there, whole. A unique
--   job whose unique_states hold 'completed' keeps its key reserved by the hot table's unique index,
--   so it goes back into awa_job, completed (the deleted version was this statement's own, so the
--   keys are free for it). Neither insert fires awa_job_move_finished's work (the hot one's WHEN is
--   false for a row that keeps its key).
-- Index: the primary key, one probe per id. The state guard is written `(j.state = 'running') IS TRUE`
--   so the planner cannot prove the running-only partial indexes apply: their estimates count live
--   rows, but while an old snapshot holds vacuum back they hold an entry for every job that ever
--   ran, and a plan that scans one of them and hash-joins the ids costs the whole history per batch.
-- Release: the rows this statement ended are handed to awa_release_jobs (migration 0012) once, in
--   this statement's transaction: it consumes their out-edges (workflow dependents) and tells their
--   waiters. Only the write that moved a row out of running returns it, so a late write of a
--   rescued attempt releases nothing and each job's edges are consumed exactly once.
--   A statement that ended no job does not call it (CASE on the count): the function's first probes
--   read awa_job_edge and awa_job_waiter, and a rescue round that only made jobs retryable waited
--   behind any lock on those tables (tests/worker/test_release_only_when_ended.py).
WITH ended AS (
    DELETE FROM awa_job AS j
    USING unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)
    WHERE j.id = d.id
      AND (j.state = 'running') IS TRUE
      AND j.run_lease = d.lease
    RETURNING j.*, (j.unique_key IS NOT NULL AND 'completed' = ANY(j.unique_states)) AS keeps_key
), moved AS (
    INSERT INTO awa_job_done (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at, attempted_at, NULL,
           NULL, now(), created_at, errors, metadata, tags, progress, unique_key, unique_states,
           run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    FROM ended
    WHERE NOT keeps_key
    RETURNING id
), kept AS (
    INSERT INTO awa_job (
        id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at,
        deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states,
        run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    )
    SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at, attempted_at, NULL,
           NULL, now(), created_at, errors, metadata, tags, progress, unique_key, unique_states,
           run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by
    FROM ended
    WHERE keeps_key
    RETURNING id
), done AS (
    SELECT id FROM moved
    UNION ALL
    SELECT id FROM kept
), released AS (
    SELECT CASE WHEN count(*) > 0 THEN awa_release_jobs(array_agg(id), array_fill('completed'::text, ARRAY[count(*)::int])) ELSE 0 END AS n FROM done
)
SELECT done.id FROM done, released
