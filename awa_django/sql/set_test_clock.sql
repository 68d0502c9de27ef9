-- set_test_clock: keep the clock a run_jobs moved durable jobs on to (now=, advance=) for the rest
--   of the test's transaction, so that a later run_jobs() does not take them back before it (a
--   sleep they went past would be in force again). set_config(…, true) is local to the
--   transaction: it is undone with it, and with the savepoint of a TestCase's test.
-- Parameters: clock (timestamptz). Index: none. Locking: none.
SELECT set_config('awa.test_clock', %(clock)s::timestamptz::text, true)
