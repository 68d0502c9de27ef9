-- copy_jobs: bulk insert (Job.objects.enqueue_many) through COPY, in the caller's transaction.
-- Rows are written as COPY text lines by awa_django.jobspec.CopyLines, in this column order.
-- A unique-key conflict aborts the COPY (the caller's savepoint rolls it back). Wake-up: between
-- begin_copy_jobs and end_copy_jobs, which NOTIFYs each queue once; the insert trigger skips the rows.
COPY awa_job (
    kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    errors, metadata, tags, unique_key, unique_states, run_lease, timeout, fair_key
) FROM STDIN
