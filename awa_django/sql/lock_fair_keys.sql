-- lock_fair_keys: take the transaction-scoped advisory lock of each capped fair key about to be
--   claimed, so that claims of one capped key, from every worker, run one at a time.
-- Parameters: queue (text), keys (text[]: sorted, so two workers take shared locks in one order and
--   never deadlock).
-- Lock id: hashtextextended(queue || E'\x1f' || key, 0) (the unit separator cannot be in a queue name
--   a worker serves next to a key). Held until the transaction ends: safe behind PgBouncer in
--   transaction mode.
-- Locking: waits for a worker holding the same key's lock; its claim commits first, so the running
--   count read next (count_running_keys, a new statement, a new snapshot) includes it.
SELECT count(pg_advisory_xact_lock(hashtextextended(%(queue)s::text || E'\x1f' || k.fair_key, 0)))
FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS k(fair_key, n)
