-- read_upstream_results: a job's upstream jobs (its in-edges) with their outcome, for
--   context.upstream(name) and the admin's workflow page.
-- Parameters: id (bigint: the downstream job). Returns (name, upstream id, state, result), by
--   upstream id. Index: awa_job_edge_downstream_idx, then awa_job's primary key. Locking: none.
SELECT e.name, e.upstream_id, u.state, u.result
FROM awa_job_edge AS e
LEFT JOIN awa_job_all AS u ON u.id = e.upstream_id
WHERE e.downstream_id = %(id)s::bigint
ORDER BY e.upstream_id
