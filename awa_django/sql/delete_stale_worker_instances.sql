-- delete_stale_worker_instances: the maintenance leader removes snapshots of workers not seen
-- for longer than %(older_than)s (interval), or than the worker's own heartbeat staleness when its
-- flags hold a longer one (rescue_stale_jobs reads it there while the worker's jobs may be live).
DELETE FROM awa_worker_instance
WHERE last_seen_at < now() - %(older_than)s::interval
  AND last_seen_at < now() - make_interval(secs => CASE
      WHEN jsonb_typeof(flags -> 'heartbeat_staleness') = 'number'
      THEN least((flags ->> 'heartbeat_staleness')::numeric, 3155760000)::float8
      ELSE 0 END)
