-- delete_stale_worker_instances: the maintenance leader removes snapshots of workers not seen
-- for longer than %(older_than)s (interval).
DELETE FROM awa_worker_instance WHERE last_seen_at < now() - %(older_than)s::interval
