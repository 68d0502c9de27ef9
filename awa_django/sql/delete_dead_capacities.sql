-- delete_dead_capacities: forget the capacity rows of workers that stopped reporting, so their
--   part returns to the others (their running jobs are rescued at the same staleness first).
-- Parameters: staleness (interval).
-- Index: none needed (one row per worker).
-- Locking: in the leader's planning transaction, after lock_capacities locked the rows.
DELETE FROM awa_worker_capacity
WHERE reported_at <= now() - %(staleness)s::interval
