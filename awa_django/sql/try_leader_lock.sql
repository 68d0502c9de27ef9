-- try_leader_lock: take the maintenance leader's session-level advisory lock if it is free (direct
--   connections and session poolers only: a transaction pooler does not keep the session).
-- Parameters: key1, key2 (integer: the lock's two int32 keys).
-- Index: none (pg_locks).
-- Locking: held by this session until it ends or releases it; never waits.
SELECT pg_try_advisory_lock(%(key1)s::integer, %(key2)s::integer)
