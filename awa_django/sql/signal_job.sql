-- signal_job: keep an event for a job (awa_job_event), and wake the job when it is parked in a
-- wait for that event (a wait step in force, awa_django.durable): it becomes available and
-- due now, and its queue is told (NOTIFY, as an enqueue does). Runs after lock_signalled_job, in
-- the same transaction: a new snapshot, taken once the row lock is held, so a park that committed
-- before it is seen here.
-- Parameters: id (bigint), event (text), payload (jsonb or NULL).
-- Returns one row: the event's id, and the queue woken (NULL when the job was not parked on it).
-- Index: the primary key of awa_job, awa_job_step's primary key. A job parked in `waiting` with
--   upstream edges open (a workflow step re-armed) is not woken: pending = 0 is required.
WITH sent AS (
    INSERT INTO awa_job_event (job_id, event, payload)
    VALUES (%(id)s::bigint, %(event)s::varchar, %(payload)s::jsonb)
    RETURNING id
), woken AS (
    UPDATE awa_job AS j
    SET state = 'available', run_at = now()
    WHERE j.id = %(id)s::bigint
      AND j.state IN ('scheduled', 'waiting')
      AND j.pending = 0
      AND EXISTS (
          SELECT 1 FROM awa_job_step AS s
          WHERE s.job_id = j.id AND s.kind = 'wait' AND s.finished_at IS NULL AND s.event = %(event)s::varchar
      )
    RETURNING j.queue
)
SELECT sent.id, woken.queue, CASE WHEN woken.queue IS NOT NULL THEN pg_notify('awa_jobs', woken.queue) END
FROM sent LEFT JOIN woken ON true
