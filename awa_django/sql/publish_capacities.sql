-- publish_capacities: the leader writes each live worker's caps, floor caps and rate shares,
--   with a lease on the database clock.
-- Parameters: ids (uuid[]), caps / floors / rates (jsonb[], one per id), lease (interval).
-- Index: the primary key.
-- Locking: runs in the same transaction as lock_capacities, on the rows it locked.
UPDATE awa_worker_capacity AS c
SET caps = p.caps,
    floors = p.floors,
    rates = p.rates,
    lease_until = now() + %(lease)s::interval,
    planned_at = now()
FROM unnest(%(ids)s::uuid[], %(caps)s::jsonb[], %(floors)s::jsonb[], %(rates)s::jsonb[])
    AS p(instance_id, caps, floors, rates)
WHERE c.instance_id = p.instance_id
