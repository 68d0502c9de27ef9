-- insert_job: insert one job (Job.objects.enqueue), in the caller's transaction.
-- Parameters: kind, queue, args (json text), priority, max_attempts, run_at (NULL = now minus
--   head_start: an interval >= 0, '0' but for a Tasks framework task's priority inside its lane),
--   metadata (json text), tags (text[]), unique_key (NULL = not unique), unique_states (text[]),
--   timeout (interval, NULL = the queue's deadline: the kind's @job(timeout=)), fair_key (varchar:
--   the job's fairness key, '' = the default key; validated by awa_django.jobspec.check_fair_key).
-- The state is decided by the database clock: a run_at in the future is 'scheduled'.
-- Uniqueness: the partial unique index awa_job_unique_key_uniq; ON CONFLICT DO NOTHING keeps the
--   caller's transaction healthy (a concurrent inserter of the same key makes this wait until it
--   commits or rolls back), and an empty result means a duplicate exists.
-- Wake-up: the row trigger awa_job_notify_insert NOTIFYs an available job's queue at commit.
INSERT INTO awa_job (
    kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    errors, metadata, tags, unique_key, unique_states, run_lease, timeout, fair_key
)
VALUES (
    %(kind)s::varchar, %(queue)s::varchar, %(args)s::jsonb,
    CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled' ELSE 'available' END,
    %(priority)s::smallint, 0, %(max_attempts)s::smallint,
    COALESCE(%(run_at)s::timestamptz, now() - %(head_start)s::interval), now(),
    '[]'::jsonb, %(metadata)s::jsonb, %(tags)s::varchar[], %(unique_key)s::varchar, %(unique_states)s::varchar[], 0,
    %(timeout)s::interval, %(fair_key)s::varchar
)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY(unique_states) DO NOTHING
RETURNING id, state, run_at, created_at
