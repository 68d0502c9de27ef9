-- copy_workflow_jobs: a workflow's jobs through COPY (Workflow.enqueue), in the caller's
-- transaction, with the ids next_job_ids took, their workflow and how many upstream edges each
-- still waits for; the other columns in copy_jobs' order (awa_django.jobspec.CopyLines).
-- Wake-up: between begin_copy_jobs and end_copy_jobs, as for copy_jobs.
COPY awa_job (
    id, workflow_id, pending,
    kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
    errors, metadata, tags, unique_key, unique_states, run_lease, timeout, fair_key
) FROM STDIN
