-- take_job_event: a durable job's wait takes the oldest event of its name sent to the job, if one
-- is there: the event row is deleted and its payload becomes the wait's result, finished now, in
-- one statement (so an event is taken by one wait, once).
-- Parameters: job (bigint), name (text: the wait's step name), event (text), attempt (int).
-- Returns the payload (one row) when an event was taken, no row when none is there, or when the
--   wait already finished (a concurrent attempt of the job took one: that event stays).
-- Index: awa_job_event_job_idx (job_id, event, id), awa_job_step's primary key.
-- Locking: the event row FOR UPDATE SKIP LOCKED (a concurrent taker leaves it to the other).
WITH ev AS (
    DELETE FROM awa_job_event
    WHERE id = (
        SELECT e.id FROM awa_job_event AS e
        WHERE e.job_id = %(job)s::bigint AND e.event = %(event)s::varchar
          AND NOT EXISTS (
              SELECT 1 FROM awa_job_step AS f
              WHERE f.job_id = %(job)s::bigint AND f.name = %(name)s::varchar AND f.finished_at IS NOT NULL
          )
        ORDER BY e.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING payload
)
INSERT INTO awa_job_step AS s (job_id, name, kind, attempt, finished_at, event, result)
SELECT %(job)s::bigint, %(name)s::varchar, 'wait', %(attempt)s::int, clock_timestamp(), %(event)s::varchar, ev.payload
FROM ev
ON CONFLICT (job_id, name) DO UPDATE
SET result = EXCLUDED.result, finished_at = EXCLUDED.finished_at, attempt = EXCLUDED.attempt
WHERE s.finished_at IS NULL
RETURNING s.result
