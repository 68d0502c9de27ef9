-- find_unique_jobs: the jobs holding any of the given unique keys in one of their unique states,
-- to name them in a UniqueJobConflictError.
-- Parameters: keys (text[]). Index: awa_job_unique_key_uniq. No locks.
SELECT id, kind, unique_key
FROM awa_job
WHERE unique_key = ANY(%(keys)s::varchar[])
  AND state = ANY(unique_states)
ORDER BY id
