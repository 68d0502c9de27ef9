-- find_downstream_jobs: which of some existing jobs (candidates) are the given jobs (ids) or wait on
--   them, directly or through other jobs: a new step that joins ids as their upstream (dynamic
--   fan-out) and also waits for one of these would close a cycle nothing could ever release.
-- Parameters: ids (bigint[]: the waiting jobs the new steps join), candidates (bigint[]: the
--   existing jobs the new steps wait for). Returns (id) of each candidate reached.
-- Index: awa_job_edge's primary key (upstream_id first), one probe per job reached. The walk starts
--   at waiting jobs, and whatever waits on a waiting job waits too: it stays within the unfinished
--   part of the graph. Locking: none (the joined jobs are locked by lock_downstream_jobs already).
WITH RECURSIVE reached(id) AS (
    SELECT unnest(%(ids)s::bigint[])
    UNION
    SELECT e.downstream_id
    FROM reached AS r
    JOIN awa_job_edge AS e ON e.upstream_id = r.id
)
SELECT id FROM reached WHERE id = ANY(%(candidates)s::bigint[])
