-- read_worker_requests: this worker's pending operator requests (drain, hold, resume), oldest
-- first, read on the settings re-read tick. Parameters: instance_id (uuid). Index: the partial
-- index awa_worker_request_pending (instance_id WHERE acknowledged_at IS NULL). No locks: only
-- this worker acknowledges its own requests.
SELECT id, action, queue, requested_by
FROM awa_worker_request
WHERE instance_id = %(instance_id)s::uuid AND acknowledged_at IS NULL
ORDER BY id
