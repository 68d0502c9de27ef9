-- report_capacity: a worker in cluster scope reports its use and reads back what the leader
--   published for it, in one round trip.
-- Parameters: instance_id (uuid), use (jsonb: {queue: {held, demand}}), applied (jsonb: {queue:
--   cap} it enforces now), global_max_workers (int or NULL: its own setting).
-- Index: the primary key (instance_id).
-- Locking: an upsert of the worker's own row. While the leader plans (it holds every row FOR
--   UPDATE) this waits, then reads the newly published caps: a worker never applies caps older
--   than the ones the leader counted it as able to apply. `read` keeps the caps returned here
--   (the row's caps before this update), which the worker applies next: until its next report the
--   leader counts them as committed, even if it publishes lower ones meanwhile. `read_rates`
--   keeps the rate parts returned here when they are leased (the worker applies only those; an
--   expired lease leaves it on the parts it read before), so the leader counts each worker at the
--   part it runs at. `leased` is evaluated on the database clock, like the lease itself.
INSERT INTO awa_worker_capacity AS c
    (instance_id, use, applied, global_max_workers, caps, read, floors, rates, reported_at)
VALUES
    (%(instance_id)s::uuid, %(use)s::jsonb, %(applied)s::jsonb, %(global_max_workers)s::int,
     '{}'::jsonb, '{}'::jsonb, '{}'::jsonb, '{}'::jsonb, now())
ON CONFLICT (instance_id) DO UPDATE
SET use = excluded.use,
    read = c.caps,
    read_rates = CASE WHEN c.lease_until IS NOT NULL AND c.lease_until > now() THEN c.rates ELSE c.read_rates END,
    applied = excluded.applied,
    global_max_workers = excluded.global_max_workers,
    reported_at = excluded.reported_at
RETURNING c.caps, c.floors, c.rates, (c.lease_until IS NOT NULL AND c.lease_until > now()) AS leased
