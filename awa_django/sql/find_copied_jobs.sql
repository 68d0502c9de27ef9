-- find_copied_jobs: the ids of the rows one enqueue_many call just wrote (immediate mode runs them
--   after commit). Parameters: created_at (timestamptz: the call's own timestamp, which every row
--   of the call carries to the microsecond), count (int: how many rows the call wrote).
-- Runs in the caller's transaction, before commit: it sees the call's uncommitted rows and only
--   committed rows of others, and no other call stamps the same microsecond in practice.
-- Index: the primary key, walked backwards from the newest id; the call's rows are the newest, so
--   the scan stops after about `count` rows. Locking: none (a plain read).
SELECT id
FROM awa_job
WHERE created_at = %(created_at)s::timestamptz
ORDER BY id DESC
LIMIT %(count)s::int
