-- advance_history_mark: record that every minute before closed_through is final (ended
-- HISTORY_GRACE ago, and not at or after the start of a transaction still open at
-- read_open_transactions, one open longer than HISTORY_OPEN_TRANSACTION_MAX aside: worker/history.py,
-- the close rule). Parameters: closed_through (timestamptz). Index: the primary key. Locking: the
-- row lock_history_mark holds.
UPDATE awa_history_mark SET closed_through = %(closed_through)s::timestamptz WHERE id = 1
