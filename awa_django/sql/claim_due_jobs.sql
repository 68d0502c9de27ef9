-- claim_due_jobs: claim due jobs on the caller's own connection, for in-process runs
--   (awa_django.testing.run_jobs and AWA["EXECUTION"] = "immediate"); workers use claim_jobs.
-- Parameters: ids (bigint[] or NULL: any job), queue (text or NULL: any queue), kind (text or
--   NULL: any kind), now (timestamptz: the cutoff for scheduled and retryable rows), limit (int).
-- Picks what a worker would run by `now`: every available row (enqueue made it available because
--   it was due; its run_at is not compared, so a row written by enqueue_many's client clock inside
--   a transaction whose now() is older still runs), and scheduled or retryable rows with
--   run_at <= now (a worker's maintenance promotes those, then claims them), of queues that are not
--   paused, in the worker's order (priority, run_at, id), leaving out the jobs of a fair key that
--   has its cap (its FairKey row's max_running, else its queue's key_max_running) running already,
--   counted as a worker's capped claim counts them; they wait. In-process runs claim one job at a
--   time (limit 1), so no claim takes a key past its cap.
-- Index: with ids, the primary key; otherwise awa_job_available_idx and awa_job_pending_run_at_idx
--   (the states are literals); a key's running count, awa_job_key_running_idx. In-process runs are
--   test and development sized.
-- Locking: the CTE locks the picked rows FOR UPDATE SKIP LOCKED, as claim_jobs does, so a worker
--   running meanwhile and this never take the same row. The UPDATE is claim_jobs' own (attempt + 1,
--   run_lease + 1, attempted_at and heartbeat_at now; no deadline): every later write of the attempt
--   (complete_jobs, finalize_jobs) matches (id, running, run_lease), exactly as for a worker.
WITH picked AS (
    SELECT id
    FROM awa_job
    WHERE state IN ('available', 'scheduled', 'retryable')
      AND (state = 'available' OR run_at <= %(now)s::timestamptz)
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(queue)s::varchar IS NULL OR queue = %(queue)s::varchar)
      AND (%(kind)s::varchar IS NULL OR kind = %(kind)s::varchar)
      AND NOT EXISTS (SELECT 1 FROM awa_queue AS q WHERE q.name = awa_job.queue AND q.paused)
      AND NOT EXISTS (
          SELECT 1
          FROM (
              SELECT COALESCE(
                  (SELECT k.max_running FROM awa_fair_key AS k WHERE k.queue = awa_job.queue AND k.key = awa_job.fair_key),
                  (SELECT q.key_max_running FROM awa_queue AS q WHERE q.name = awa_job.queue)
              ) AS cap
          ) AS c
          WHERE c.cap IS NOT NULL
            AND c.cap <= (SELECT count(*) FROM awa_job AS r
                          WHERE r.state = 'running' AND r.queue = awa_job.queue AND r.fair_key = awa_job.fair_key)
      )
    ORDER BY priority, run_at, id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
)
UPDATE awa_job AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    attempted_by = NULL,
    heartbeat_at = now(),
    deadline_at = NULL
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.kind, j.queue, j.args, j.attempt, j.max_attempts, j.run_lease, j.priority, j.metadata, j.fair_key, j.workflow_id
