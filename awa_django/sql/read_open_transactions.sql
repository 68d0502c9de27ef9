-- read_open_transactions: the history rollup's view of the transactions that could still commit a
--   finished job into a minute it is about to close. A finalising write stamps finalized_at with
--   its transaction's now(), which is that transaction's xact_start here, and the rollup cannot
--   see the row before the commit: while such a transaction is open, no minute from its
--   xact_start on may be closed. Returns at most two rows, oldest first in each: the oldest open
--   transaction that started at or after `since` (passed_over false: it holds the minutes open),
--   and the oldest that started before it (passed_over true: open longer than
--   HISTORY_OPEN_TRANSACTION_MAX, a session left idle in a transaction or a stuck one, which no
--   longer holds the history back and is logged).
--   Read: client backends of this database, but the caller's own (the round's transaction), each
--   with pid, xact_start, state, application_name and usename. A session of another role shows no
--   xact_start unless the caller's role may read all statistics (pg_read_all_stats, or the role
--   itself): such sessions are not seen (docs/design.md, the history rollup). Prepared (two-phase)
--   transactions are not in pg_stat_activity.
-- Parameters: since (timestamptz). Index: none (pg_stat_activity reads the server's backend status
--   array, one entry per connection: cheap, once per round). Locking: none; run in the round's
--   transaction after lock_history_mark and before roll_up_history, so that a transaction not open
--   at this read either committed before roll_up_history's snapshot or started after the round's
--   now() (worker/history.py says why that suffices).
SELECT DISTINCT ON (a.xact_start < %(since)s::timestamptz)
       a.pid,
       a.xact_start,
       a.state,
       a.application_name,
       a.usename::text AS usename,
       a.xact_start < %(since)s::timestamptz AS passed_over
FROM pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.backend_type = 'client backend'
  AND a.pid <> pg_backend_pid()
  AND a.xact_start IS NOT NULL
ORDER BY a.xact_start < %(since)s::timestamptz, a.xact_start
