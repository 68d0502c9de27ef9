-- begin_copy_jobs: before enqueue_many's COPY, in the caller's transaction: the insert trigger
--   (awa_job_notify_insert, a row trigger) skips the rows while awa.notify_by_caller is 'on', so
--   a bulk insert does not pay one trigger call per row; end_copy_jobs sends the NOTIFYs instead.
-- Parameters: none. Transaction-local (set_config's third argument): a COPY that fails rolls it
--   back with the call's savepoint, and it never outlives the transaction. Locking: none.
SELECT set_config('awa.notify_by_caller', 'on', true)
