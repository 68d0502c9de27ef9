-- read_cluster_settings: the cluster's global maximum (scope "cluster"); creates the one row,
--   seeded with the caller's own setting, the first time.
-- Parameters: global_max_workers (int or NULL: the caller's own setting, used only to seed).
-- Index: the primary key (id = 1).
-- Locking: an upsert that changes nothing when the row exists (ON CONFLICT ... DO UPDATE SET id
--   = id returns the existing row); concurrent first starts agree on one row.
INSERT INTO awa_cluster AS s (id, global_max_workers)
VALUES (1, %(global_max_workers)s::int)
ON CONFLICT (id) DO UPDATE SET id = s.id
RETURNING s.global_max_workers
