-- rescue_stale_jobs: hand back running jobs whose worker went silent (stale heartbeat) or whose
-- deadline passed: retryable and due now, or failed when the attempt was the last one; an error
-- entry records why. Run by the maintenance leader only.
-- Parameters: staleness (interval), limit (int).
-- Whose staleness: the leader's, or the attempt's own worker's when that worker still reports
--   (its awa_worker_instance row, matched by attempted_by = host:pid) with a longer one in its flags
--   (--heartbeat-staleness): workers may run with their own heartbeat settings (a rolling deploy
--   that raised HEARTBEAT_INTERVAL, one worker tuned by hand), and a live worker's job rescued
--   between two of its heartbeats would run twice. A past deadline rescues whatever the staleness.
-- Returns each rescued job's id, new state, kind, queue, attempt and why (its outcome log line).
-- Index: awa_job_running_hb_idx and awa_job_running_dl_idx (partial, state = 'running').
-- Locking: SKIP LOCKED, so a worker finalising the same row right now wins, and the rescue skips it.
-- Bumping run_lease makes any late write by the old worker miss its guard.
-- Release: the rows this statement failed (attempts used up) are handed to awa_release_jobs (migration 0012) once, in
--   this statement's transaction: it consumes their out-edges (workflow dependents) and tells their
--   waiters. Only the write that moved a row out of running returns it, so a late write of a
--   rescued attempt releases nothing and each job's edges are consumed exactly once.
--   A statement that ended no job does not call it (CASE on the count): the function's first probes
--   read awa_job_edge and awa_job_waiter, and a rescue round that only made jobs retryable waited
--   behind any lock on those tables (tests/worker/test_release_only_when_ended.py).
WITH stale AS (
    SELECT j.id
    FROM awa_job AS j
    WHERE j.state = 'running'
      AND (j.heartbeat_at < now() - %(staleness)s::interval OR j.deadline_at < now())
      AND (j.deadline_at < now() OR NOT EXISTS (
          SELECT 1
          FROM awa_worker_instance AS w
          WHERE w.hostname || ':' || w.pid = j.attempted_by
            AND j.heartbeat_at >= now() - make_interval(secs => CASE
                WHEN jsonb_typeof(w.flags -> 'heartbeat_staleness') = 'number'
                THEN least((w.flags ->> 'heartbeat_staleness')::numeric, 3155760000)::float8 END)
      ))
    ORDER BY j.id
    LIMIT %(limit)s::int
    FOR UPDATE OF j SKIP LOCKED
), rescued AS (
UPDATE awa_job AS j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END,
    run_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    run_lease = j.run_lease + 1,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'error', CASE WHEN j.deadline_at < now() AND j.timeout IS NOT NULL
                      THEN 'deadline exceeded: the job ran past its kind''s timeout'
                      WHEN j.deadline_at < now()
                      THEN 'deadline exceeded: the job ran past its queue''s deadline'
                      ELSE 'rescued: the worker stopped heartbeating (crashed or lost its connection)' END,
        'attempt', j.attempt,
        'at', now()
    ) || CASE WHEN j.attempted_by IS NULL THEN '{}'::jsonb
              ELSE jsonb_build_object('started_at', j.attempted_at, 'worker', j.attempted_by) END),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM stale
WHERE j.id = stale.id
RETURNING j.id, j.state, j.kind, j.queue, j.attempt, j.errors -> -1 ->> 'error' AS reason
), released AS (
    SELECT CASE WHEN count(*) > 0 THEN awa_release_jobs(array_agg(id), array_agg(state::text)) ELSE 0 END AS n FROM rescued WHERE state = 'failed'
)
SELECT rescued.id, rescued.state, rescued.kind, rescued.queue, rescued.attempt, rescued.reason
FROM rescued, released
