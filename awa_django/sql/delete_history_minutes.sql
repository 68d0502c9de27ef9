-- delete_history_minutes: clear the minutes a rollup round is about to write, and the minutes
-- that fell out of the window. Parameters: start, stop (timestamptz: the round's minutes are
-- start <= minute < stop), expired (timestamptz: minutes before it are dropped). Index:
-- awa_history_minute_uniq (minute, dimension, name), two ranges. Locking: run under
-- lock_history_mark's row lock; nothing else writes awa_history.
DELETE FROM awa_history
WHERE (minute >= %(start)s::timestamptz AND minute < %(stop)s::timestamptz)
   OR minute < %(expired)s::timestamptz
