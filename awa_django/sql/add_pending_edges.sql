-- add_pending_edges: raise the pending count of waiting jobs that new upstream edges point to, in
--   the caller's transaction, after lock_downstream_jobs locked them (so no release interleaves).
-- Parameters: ids (bigint[]), counts (int[]: new edges into each). Returns the ids it changed;
--   a row no longer waiting is left alone (the caller refuses the enqueue then).
-- Index: the primary key. Locking: the rows are already locked FOR UPDATE.
UPDATE awa_job AS j
SET pending = j.pending + d.n
FROM unnest(%(ids)s::bigint[], %(counts)s::int[]) AS d(id, n)
WHERE j.id = d.id
  AND j.state = 'waiting'
RETURNING j.id
