-- notify_worker_requests: wake the workers' settings re-read tick (the queues channel), so a
-- request made in the admin is read at once rather than at the end of the interval.
-- Parameters: channel (text), worker (text: host:pid, for the log). Sent inside the requesting
-- transaction: Postgres delivers it at commit, never before.
SELECT pg_notify(%(channel)s::text, %(worker)s::text)
