-- claim_keyed_jobs: mark running, per fair key of one queue, up to that key's count of its due,
--   available jobs, and return them: the claim of a queue whose slots are shared by key
--   (worker/keyed.py; the grants come from concurrency/keys.py KeyShares.pick).
-- Parameters: queue (text); grants (json: one array per granted key, [key, count, priority,
--   run_at, id]: its count, never more than the permits the runner holds for it, then the
--   (priority, run_at, id) its scan starts after, run_at in epoch seconds, or its
--   isoformat text outside 1698-2242 where a float is not exact to the microsecond, nulls for the key's
--   front; the runner keeps a cursor per active key. worker/keyed.py claim_grants: one json.dumps,
--   where five arrays cost a Python dump per element); deadline (interval or NULL: the queue's
--   deadline); worker (text): the claiming worker's host:pid, stored as attempted_by.
-- Order: within each key, priority, then run_at, then id: priority orders a key's own jobs and never
--   reaches across keys.
-- Index: awa_job_key_available_idx (queue, fair_key, priority, run_at, id) WHERE state = 'available':
--   per key `queue =`, `fair_key =` and the row comparison on (priority, run_at, id) bound the scan,
--   so a key's claimed jobs (dead entries while an old snapshot holds vacuum back) lie behind its
--   cursor and are not walked; no other key's entries are touched. The UPDATE finds the rows through
--   the primary key, as claim_jobs does.
-- Locking: each key's sub-select locks its rows FOR UPDATE SKIP LOCKED as its LIMIT pulls them, so
--   concurrent workers pick disjoint rows and never wait on each other. In autocommit for uncapped
--   keys; for capped keys inside the transaction that holds their advisory locks and read their
--   running counts (lock_fair_keys, count_running_keys), which is what makes a cap exact. A paused
--   queue claims nothing.
-- Each claim starts a new attempt: attempt + 1, and run_lease + 1, as claim_jobs. Its times are the
--   statement's, not the transaction's: a capped claim's transaction began before it waited for its
--   locks, and attempted_at must not precede the completions its running count saw.
-- Returns the ClaimedJob fields, as claim_jobs.
WITH picked AS (
    SELECT p.id
    FROM json_array_elements(%(grants)s::json) AS e
    CROSS JOIN LATERAL (
        SELECT (e->>0)::varchar AS fair_key, (e->>1)::int AS n, (e->>2)::int AS after_priority,
            (CASE json_typeof(e->3) WHEN 'number' THEN to_timestamp((e->>3)::float8) ELSE (e->>3)::timestamptz END) AS after_run_at, (e->>4)::bigint AS after_id
    ) AS g
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM awa_job AS j
        WHERE j.state = 'available'
          AND j.queue = %(queue)s::varchar
          AND j.fair_key = g.fair_key
          AND j.run_at <= now()
          AND (j.priority, j.run_at, j.id) > (COALESCE(g.after_priority, 0), COALESCE(g.after_run_at, '-infinity'),
                                              COALESCE(g.after_id, 0))
        ORDER BY j.priority, j.run_at, j.id
        LIMIT g.n
        FOR UPDATE SKIP LOCKED
    ) AS p
    WHERE NOT EXISTS (SELECT 1 FROM awa_queue WHERE name = %(queue)s::varchar AND paused)
)
UPDATE awa_job AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = statement_timestamp(),
    attempted_by = %(worker)s::varchar,
    heartbeat_at = statement_timestamp(),
    -- A row's timeout is capped to 0..100 years as read: a longer one (written past @job's checks,
    -- by SQL) put deadline_at past timestamp's range and failed the claim of the whole queue.
    deadline_at = statement_timestamp() + COALESCE((CASE WHEN j.timeout IS NOT NULL THEN GREATEST(LEAST(j.timeout, interval '100 years'), interval '0') END), %(deadline)s::interval)
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.kind, j.queue, j.args, j.attempt, j.max_attempts, j.run_lease, j.priority, j.metadata, j.run_at,
    EXTRACT(EPOCH FROM statement_timestamp() - j.run_at)::float8 AS waited, EXTRACT(EPOCH FROM (CASE WHEN j.timeout IS NOT NULL THEN GREATEST(LEAST(j.timeout, interval '100 years'), interval '0') END))::float8 AS timeout, j.fair_key, j.workflow_id
