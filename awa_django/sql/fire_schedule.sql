-- fire_schedule: insert the jobs of one schedule's due slots and advance the schedule, in one
--   statement, so a fire and its advance commit together or not at all.
-- Parameters: id (bigint); expected_last_fire_at, expected_next_fire_at (timestamptz, the values
--   the caller read: the compare of the compare-and-swap); fire_ats (timestamptz[], the slots to
--   fire), fire_at_texts (text[], the same slots as ISO 8601 text for the jobs' metadata),
--   unique_keys (varchar[], one per slot: the schedule name and slot, hashed); last_fire_at,
--   next_fire_at (timestamptz, the swap; last_fire_at is the latest slot due even if it is not
--   fired, next_fire_at the first slot after now); derived_key (varchar: the fairness key the
--   kind's @job(fair_key=) gives the args the caller read, '' for none). The jobs' key is the
--   locked row's own fair_key when it has one, else derived_key.
-- Locking contract (compare-and-swap): the CTE `claimed` locks the schedule row FOR UPDATE only if
--   it still has the expected last and next fire times, is not paused and is still declared.
--   A second leader running this for the same slots (failover, split brain) blocks on that lock;
--   when the first commits, Postgres re-checks the row's new version (READ COMMITTED), the
--   compare fails, `claimed` is empty, and it inserts nothing and advances nothing. As a second
--   guard, every job carries unique_key = hash(schedule, slot) enforced in every state by the
--   partial unique index awa_job_unique_key_uniq, so one slot can never have two jobs even if
--   the schedule row were rewound by hand (ON CONFLICT DO NOTHING skips such a slot).
-- Index: the primary key of awa_schedule; awa_job_unique_key_uniq for the conflict check.
-- Wake-up: the statement trigger awa_job_notify_insert NOTIFYs the queue at commit.
-- Returns one row: advanced (0 or 1) and the ids of the jobs inserted.
WITH claimed AS (
    SELECT id, name, kind, queue, args, priority, max_attempts, fair_key
    FROM awa_schedule
    WHERE id = %(id)s::bigint
      AND last_fire_at IS NOT DISTINCT FROM %(expected_last_fire_at)s::timestamptz
      AND next_fire_at IS NOT DISTINCT FROM %(expected_next_fire_at)s::timestamptz
      AND NOT paused
      AND removed_from_code_at IS NULL
    FOR UPDATE
),
inserted AS (
    INSERT INTO awa_job (
        kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
        errors, metadata, tags, unique_key, unique_states, run_lease, fair_key
    )
    SELECT c.kind, c.queue, c.args, 'available', c.priority, 0, c.max_attempts, now(), now(),
        '[]'::jsonb, jsonb_build_object('schedule', c.name, 'fire_at', slot.fire_at_text),
        '{}'::varchar[], slot.unique_key,
        ARRAY['scheduled', 'available', 'running', 'completed', 'retryable', 'failed', 'cancelled']::varchar[], 0,
        CASE WHEN c.fair_key <> '' THEN c.fair_key ELSE %(derived_key)s::varchar END
    FROM claimed AS c,
        unnest(%(fire_ats)s::timestamptz[], %(fire_at_texts)s::text[], %(unique_keys)s::varchar[])
            AS slot(fire_at, fire_at_text, unique_key)
    ORDER BY slot.fire_at
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY(unique_states) DO NOTHING
    RETURNING id
),
advanced AS (
    UPDATE awa_schedule AS s
    SET last_fire_at = %(last_fire_at)s::timestamptz,
        next_fire_at = %(next_fire_at)s::timestamptz,
        last_job_id = COALESCE((SELECT max(id) FROM inserted), s.last_job_id)
    FROM claimed
    WHERE s.id = claimed.id
    RETURNING s.id
)
SELECT (SELECT count(*) FROM advanced)::int AS advanced, ARRAY(SELECT id FROM inserted ORDER BY id) AS job_ids
