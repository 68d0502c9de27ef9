-- end_copy_jobs: after enqueue_many's COPY, in the caller's transaction: NOTIFY each queue that got
--   available jobs (Postgres delivers them at commit, one per queue per transaction, as the
--   trigger's are), and turn the insert trigger back on for the rest of the transaction.
-- Parameters: channel (text), queues (text[]: the queues with available jobs, may be empty).
-- Always one row: the aggregate runs the notifying sub-select to its end before set_config.
-- Locking: none.
SELECT count(*), set_config('awa.notify_by_caller', '', true)
FROM (SELECT pg_notify(%(channel)s::text, q) FROM unnest(%(queues)s::text[]) AS q) AS sent
