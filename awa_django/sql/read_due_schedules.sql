-- read_due_schedules: the schedules the maintenance leader must fire now, and the database clock.
-- Returns each row's kind, args and fair_key too: a schedule without a key of its own fires with its
--   kind's derived key, which the leader computes from the args (awa_django.worker.scheduler).
-- Parameters: limit (int); skip_ids (bigint[]), skip_crons, skip_zones (text[]): rows the leader
--   found invalid (awa.E009) with that cron and zone, left out until either changes.
-- Index: awa_schedule_due_idx (next_fire_at) WHERE NOT paused AND removed_from_code_at IS NULL.
-- Locking: none (a plain read); fire_schedule re-checks each row
--   under a row lock, so a row that changed since this read simply does not fire.
-- The leader computes the slots from these values and the returned now, so every leader uses the
--   database's clock, never its own. A row with no next_fire_at (written around the services,
--   e.g. Schedule.objects.create) is returned too, so that the leader sets its first fire time.
SELECT id, name, kind, args, fair_key, cron, timezone, missed, catch_up_limit, next_fire_at, last_fire_at,
    now() AS db_now
FROM awa_schedule
WHERE (next_fire_at <= now() OR next_fire_at IS NULL)
  AND NOT paused
  AND removed_from_code_at IS NULL
  AND NOT EXISTS (
      SELECT FROM unnest(%(skip_ids)s::bigint[], %(skip_crons)s::text[], %(skip_zones)s::text[])
          AS skip(id, cron, timezone)
      WHERE skip.id = awa_schedule.id AND skip.cron = awa_schedule.cron AND skip.timezone = awa_schedule.timezone
  )
ORDER BY next_fire_at
LIMIT %(limit)s::int
