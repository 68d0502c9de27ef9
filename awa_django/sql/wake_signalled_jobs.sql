-- wake_signalled_jobs: right after the jobs that parked in a wait are written (finalize_jobs, in
-- the same transaction), wake those whose event came meanwhile: a signal that locked the row
-- first (lock_signalled_job) and committed its event before the park's row write could go on is
-- seen by this later statement's snapshot, and no wake-up is lost either way.
-- Parameters: ids (bigint[]), leases (bigint[]): the parked attempts (their run_lease stays on
--   the row). Returns the ids woken (a subset of the ids just written) and NOTIFYs their queues.
-- Index: the primary key, awa_job_step's primary key, awa_job_event_job_idx.
WITH woken AS (
    UPDATE awa_job AS j
    SET state = 'available', run_at = now()
    FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)
    WHERE j.id = d.id
      AND j.run_lease = d.lease
      AND j.state IN ('scheduled', 'waiting')
      AND j.pending = 0
      AND EXISTS (
          SELECT 1 FROM awa_job_step AS s
          JOIN awa_job_event AS e ON e.job_id = s.job_id AND e.event = s.event
          WHERE s.job_id = j.id AND s.kind = 'wait' AND s.finished_at IS NULL
      )
    RETURNING j.id, j.queue
)
SELECT woken.id, pg_notify('awa_jobs', woken.queue) FROM woken
