-- upsert_worker_instance: write this worker's health snapshot. Parameters: instance_id (uuid),
-- hostname, pid, started_at, mode, global_max_workers, queues (jsonb), flags (jsonb).
-- Index: unique instance_id. Locking: one row, this worker's own.
INSERT INTO awa_worker_instance (
    instance_id, hostname, pid, started_at, last_seen_at, mode, global_max_workers, queues, flags
)
VALUES (
    %(instance_id)s::uuid, %(hostname)s::varchar, %(pid)s::int, %(started_at)s::timestamptz, now(),
    %(mode)s::varchar, %(global_max_workers)s::int, %(queues)s::jsonb, %(flags)s::jsonb
)
ON CONFLICT (instance_id) DO UPDATE
SET last_seen_at = now(),
    mode = EXCLUDED.mode,
    global_max_workers = EXCLUDED.global_max_workers,
    queues = EXCLUDED.queues,
    flags = EXCLUDED.flags
