-- copy_jobs: bulk insert (Job.objects.enqueue_many) through COPY, in the caller's transaction.
-- Rows are written as COPY text lines by awa_django.jobspec.CopyLines, in this column order.
-- A unique-key conflict aborts the COPY (the caller's savepoint rolls it back); the insert
-- trigger NOTIFYs each queue once.
COPY awa_job (
    kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    errors, metadata, tags, unique_key, unique_states, run_lease, timeout
) FROM STDIN
