-- lock_capacities: the leader reads every worker's capacity row to plan the next caps.
-- Parameters: staleness (interval: a row not reported for this long is a dead worker's).
-- Index: none needed (one row per live worker).
-- Locking: FOR UPDATE in the leader's planning transaction, so no worker reports (and reads its
--   caps) between this read and publish_capacities; rows in id order, like every batch here.
SELECT instance_id, use, applied, caps, global_max_workers, reported_at > now() - %(staleness)s::interval AS live,
       read
FROM awa_worker_capacity
ORDER BY instance_id
FOR UPDATE
