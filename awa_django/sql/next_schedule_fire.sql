-- next_schedule_fire: seconds from the database's now until the earliest active schedule is due
--   (NULL when none is), so the maintenance leader sleeps just long enough for per-second cron.
-- Parameters: none. Index: awa_schedule_due_idx (next_fire_at) WHERE NOT paused AND
--   removed_from_code_at IS NULL (min() reads its first entry). Locking: none (a plain read).
SELECT extract(epoch FROM min(next_fire_at) - now())::float8
FROM awa_schedule
WHERE NOT paused
  AND removed_from_code_at IS NULL
