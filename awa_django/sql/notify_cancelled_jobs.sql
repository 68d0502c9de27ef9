-- notify_cancelled_jobs: tell the workers that these running jobs were cancelled; the worker
-- holding one tells its handler (JobContext.cancelled). Parameters: channel (text), ids (bigint[]).
-- Sent inside the cancelling transaction: Postgres delivers it at commit, never before.
SELECT pg_notify(%(channel)s::text, id::text) FROM unnest(%(ids)s::bigint[]) AS id
