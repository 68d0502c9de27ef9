-- read_test_clock: run_jobs' clocks (awa_django.testing): the test clock, the furthest a run_jobs
--   moved durable jobs' clock on in this transaction (the setting awa.test_clock, local to the
--   transaction: see set_test_clock), the transaction's now() and the clock as it reads now
--   (clock_timestamp(): a durable sleep counts from it).
-- Parameters: none. Returns one row: kept (the test clock, NULL when none was set), transaction_now
--   (now()), clock (clock_timestamp()).
-- Index: none. Locking: none.
SELECT nullif(current_setting('awa.test_clock', true), '')::timestamptz AS kept, now() AS transaction_now,
       clock_timestamp() AS clock
