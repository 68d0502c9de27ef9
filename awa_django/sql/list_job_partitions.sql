-- list_job_partitions: the range partitions of the finished jobs' table, each with its branch
-- (awa_job_done_completed or awa_job_done_failed) and its bounds [lower, upper), oldest first.
-- The DEFAULT partitions are left out. The bounds are read back from the catalog's text of each
-- partition bound, cast in this session (the text is written in its time zone).
-- Parameters: none. Reads the catalog only (no lock on the tables).
SELECT parent.relname AS branch,
       child.relname AS name,
       (regexp_match(pg_get_expr(child.relpartbound, child.oid), $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$))[1]::timestamptz AS lower,
       (regexp_match(pg_get_expr(child.relpartbound, child.oid), $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$))[2]::timestamptz AS upper
FROM pg_inherits AS i
JOIN pg_class AS parent ON parent.oid = i.inhparent
JOIN pg_class AS child ON child.oid = i.inhrelid
WHERE i.inhparent IN ('awa_job_done_completed'::regclass, 'awa_job_done_failed'::regclass)
  AND pg_get_expr(child.relpartbound, child.oid) <> 'DEFAULT'
ORDER BY branch, lower
