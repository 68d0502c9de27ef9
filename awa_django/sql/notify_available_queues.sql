-- notify_available_queues: wake the workers of queues that have new available jobs (the insert
-- trigger does this for inserts; a retry is an update). Parameters: channel (text), queues (text[]).
SELECT pg_notify(%(channel)s::text, q) FROM unnest(%(queues)s::text[]) AS q
