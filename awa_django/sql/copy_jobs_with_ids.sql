-- copy_jobs_with_ids: enqueue_many's bulk insert when it writes its rows out of the caller's order:
-- its unique rows in the order of their keys (awa_django.managers._Bulk.key_order), so that two
-- calls take overlapping keys in one order and never deadlock each other. Each line is the id
-- next_job_ids took for the row's place in the call, then the columns of copy_jobs, so ids still
-- follow the caller's order (the claim order of jobs due at one moment).
-- Locking: each unique row's index entry, in line order: a key another transaction holds,
-- uncommitted, makes the COPY wait for it to end (then conflict, or go on). A unique-key conflict
-- aborts the COPY (the caller's savepoint rolls it back). Wake-up: as for copy_jobs.
COPY awa_job (
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    errors, metadata, tags, unique_key, unique_states, run_lease, timeout, fair_key
) FROM STDIN
