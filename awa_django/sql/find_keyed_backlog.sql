-- find_keyed_backlog: whether one queue has an available job on a fair key other than the default
--   one: read before a queue's first claim (worker/runner.py), so a queue with keyed backlog shares
--   its slots by key from that claim on instead of taking its first batch in plain order.
-- Parameters: queue (text).
-- Returns: keyed (boolean).
-- Index: awa_job_key_available_idx (queue, fair_key, priority, run_at, id) WHERE state = 'available':
--   one descent to the first entry past the default key ''; the scan stops at the first live one
--   (a job not yet due counts too: its key will have due jobs, and keyed claiming is harmless).
--   Run once per queue per worker start, off the claim path.
-- Locking: a plain read, no locks.
SELECT EXISTS (
    SELECT 1
    FROM awa_job AS j
    WHERE j.state = 'available'
      AND j.queue = %(queue)s::varchar
      AND j.fair_key > ''
) AS keyed
