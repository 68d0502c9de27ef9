-- estimate_job_count: the planner's row estimate for a table (-1 or 0 before the first ANALYZE),
-- so the admin never counts a million rows. Parameters: table (regclass name). No locks.
SELECT reltuples::bigint FROM pg_class WHERE oid = %(table)s::regclass
