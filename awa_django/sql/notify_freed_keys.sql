-- notify_freed_keys: tell every worker that attempts of capped fair keys ended, so a keyed claimer
--   that a cap held by another worker held back claims again at once (worker/keyed.py, "Caps").
-- Parameters: channel (text: FREED_KEYS_CHANNEL), queues (text[]) and keys (text[]): one (queue, key)
--   per ended attempt of a capped key.
-- Payload: the JSON array [queue, key], unambiguous whatever either string holds (a key is at most
--   128 characters, far inside NOTIFY's 8,000 bytes); Postgres folds repeats within a transaction
--   into one notification.
-- Sent in the transaction that writes the attempts' ends (the writer's pipeline, after complete_jobs
--   and finalize_jobs), so it is delivered only once they commit: the listener's claim, counting the
--   key's running rows in a new snapshot, sees the slot free. Only capped keys are named: a keyless
--   or uncapped queue's writes send nothing.
-- Locking: none.
SELECT count(pg_notify(%(channel)s::text, json_build_array(f.queue, f.fair_key)::text))
FROM unnest(%(queues)s::text[], %(keys)s::text[]) AS f(queue, fair_key)
