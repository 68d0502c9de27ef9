-- delete_worker_capacity: a worker leaving cluster scope removes its row at shutdown, after its
--   jobs were written or handed back, so its part returns to the others at once.
-- Parameters: instance_id (uuid).
-- Index: the primary key.
-- Locking: its own row only; waits for a planning leader's transaction.
DELETE FROM awa_worker_capacity WHERE instance_id = %(instance_id)s::uuid
