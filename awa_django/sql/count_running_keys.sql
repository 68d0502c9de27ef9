-- count_running_keys: per fair key of one queue, how many of its jobs are running now, in every
--   worker: a capped key's claim takes at most its cap minus this.
-- Parameters: queue (text), keys (text[]).
-- Returns: fair_key, running_count (int), one row per key given.
-- Index: awa_job_key_running_idx (queue, fair_key) WHERE state = 'running': reads a key's running
--   entries only (about its cap).
-- Locking: a plain read, run after lock_fair_keys in the same transaction: READ COMMITTED takes a new
--   snapshot per statement, so every claim of these keys committed before the locks were granted is
--   counted, and no other claim of them can commit until this transaction ends; completions and
--   rescues only lower the count meanwhile.
SELECT k.fair_key,
       (SELECT count(*) FROM awa_job AS j
        WHERE j.state = 'running' AND j.queue = %(queue)s::varchar AND j.fair_key = k.fair_key)::int AS running_count
FROM unnest(%(keys)s::varchar[]) AS k(fair_key)
