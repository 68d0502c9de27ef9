-- lock_capacities: the leader reads every worker's capacity row to plan the next caps.
-- Parameters: staleness (interval: a row not reported for this long is a dead worker's), margin
--   (interval): a worker whose snapshot flags carry a longer heartbeat staleness of its own (see
--   rescue_stale_jobs) is live until that staleness plus the margin, as its jobs are rescued no sooner.
-- Index: none needed (one row per live worker).
-- Locking: FOR UPDATE in the leader's planning transaction, so no worker reports (and reads its
--   caps) between this read and publish_capacities; rows in id order, like every batch here.
SELECT c.instance_id, c.use, c.applied, c.caps, c.global_max_workers,
       c.reported_at > now() - greatest(%(staleness)s::interval, (
           SELECT max(make_interval(secs => CASE
                       WHEN jsonb_typeof(w.flags -> 'heartbeat_staleness') = 'number'
                       THEN least((w.flags ->> 'heartbeat_staleness')::numeric, 3155760000)::float8 END)) + %(margin)s::interval
           FROM awa_worker_instance AS w
           WHERE w.instance_id = c.instance_id
       )) AS live,
       c.read, c.read_rates
FROM awa_worker_capacity AS c
ORDER BY c.instance_id
FOR UPDATE OF c
