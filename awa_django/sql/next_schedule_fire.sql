-- next_schedule_fire: seconds from the database's now until the earliest active schedule is due
--   (NULL when none is), so the maintenance leader sleeps just long enough for per-second cron.
-- Parameters: skip_ids (bigint[]), skip_crons, skip_zones (text[]): rows the leader found invalid
--   (awa.E009) with that cron and zone: they stay due but cannot fire, so they are not waited for.
-- Index: awa_schedule_due_idx (next_fire_at) WHERE NOT paused AND removed_from_code_at IS NULL
--   (min() reads its entries in order). Locking: none (a plain read).
SELECT extract(epoch FROM min(next_fire_at) - now())::float8
FROM awa_schedule
WHERE NOT paused
  AND removed_from_code_at IS NULL
  AND NOT EXISTS (
      SELECT FROM unnest(%(skip_ids)s::bigint[], %(skip_crons)s::text[], %(skip_zones)s::text[])
          AS skip(id, cron, timezone)
      WHERE skip.id = awa_schedule.id AND skip.cron = awa_schedule.cron AND skip.timezone = awa_schedule.timezone
  )
