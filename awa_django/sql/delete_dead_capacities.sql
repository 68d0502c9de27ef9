-- delete_dead_capacities: forget the capacity rows of workers that stopped reporting, so their
--   part returns to the others (their running jobs are rescued at the same staleness first).
-- Parameters: staleness (interval), margin (interval): as lock_capacities, a worker's own longer
--   heartbeat staleness (its snapshot flags) plus the margin keeps its row.
-- Index: none needed (one row per worker).
-- Locking: in the leader's planning transaction, after lock_capacities locked the rows.
DELETE FROM awa_worker_capacity AS c
WHERE c.reported_at <= now() - greatest(%(staleness)s::interval, (
    SELECT max(make_interval(secs => CASE
            WHEN jsonb_typeof(w.flags -> 'heartbeat_staleness') = 'number'
            THEN least((w.flags ->> 'heartbeat_staleness')::numeric, 3155760000)::float8 END)) + %(margin)s::interval
    FROM awa_worker_instance AS w
    WHERE w.instance_id = c.instance_id
))
