-- database_now: the database's clock as enqueue and finalisation read it: now(), the start of the
--   current transaction (in autocommit, of this statement). run_jobs fixes its cutoff with it, so
--   that a retry written during the run (run_at = now() + backoff) is never due in the same run.
-- Parameters: none. Index: none. Locking: none.
SELECT now()
