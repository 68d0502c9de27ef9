-- advance_history_mark: record that every minute before closed_through is final. Parameters:
-- closed_through (timestamptz). Index: the primary key. Locking: the row lock_history_mark holds.
UPDATE awa_history_mark SET closed_through = %(closed_through)s::timestamptz WHERE id = 1
