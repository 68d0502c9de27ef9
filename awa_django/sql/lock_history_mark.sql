-- lock_history_mark: the history rollup's watermark, locked for the caller's transaction, and the
-- clock the round reads minutes by. Parameters: now (timestamptz, NULL: the database's now()).
-- Returns closed_through (NULL before the first round: every minute of the window is open) and now.
-- Index: the primary key (one row, id 1; created here if it is missing). Locking: the upsert holds
-- the row lock until commit, so a second leader's round waits for the first and then reads the
-- watermark the first wrote: rounds never interleave and never double count.
INSERT INTO awa_history_mark AS m (id, closed_through)
VALUES (1, NULL)
ON CONFLICT (id) DO UPDATE SET closed_through = m.closed_through
RETURNING m.closed_through, COALESCE(%(now)s::timestamptz, now()) AS now
