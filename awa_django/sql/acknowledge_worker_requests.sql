-- acknowledge_worker_requests: the worker acted on these requests; record when (the database
-- clock, so it compares with attempted_at) and what it said. Parameters: ids (bigint[]), answers
-- (text[], one per id). Index: primary key. Locking: these rows only, this worker's own; a
-- request already acknowledged keeps its first answer.
UPDATE awa_worker_request AS r
SET acknowledged_at = now(), answer = a.answer
FROM unnest(%(ids)s::bigint[], %(answers)s::text[]) AS a (id, answer)
WHERE r.id = a.id AND r.acknowledged_at IS NULL
