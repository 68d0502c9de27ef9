-- estimate_job_count: the planner's row estimate of every job, hot and finished, so the admin never
-- counts a million rows: awa_job's reltuples plus, where finished jobs have their own partitioned
-- table (awa_job_done, migration 0023), the reltuples of each of its leaf partitions (the
-- partitioned parent has none of its own). NULL before the first ANALYZE of any of them (reltuples
-- is -1 until then). Reads pg_class only. Parameters: none. No locks.
SELECT (sum(c.reltuples) FILTER (WHERE c.reltuples >= 0))::bigint
FROM pg_class AS c
WHERE c.oid = 'awa_job'::regclass
   OR c.oid IN (SELECT t.relid FROM pg_partition_tree(to_regclass('awa_job_done')) AS t WHERE t.isleaf)
