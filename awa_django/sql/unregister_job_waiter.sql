-- unregister_job_waiter: the waiter is done (result, error or timeout).
-- Parameters: id (bigint), token (text). Index: awa_job_waiter's primary key. Locking: none.
DELETE FROM awa_job_waiter WHERE job_id = %(id)s::bigint AND token = %(token)s::text
