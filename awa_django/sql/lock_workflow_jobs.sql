-- lock_workflow_jobs: lock every job of one workflow and return (id, state) in id order, for
-- retry_workflow (awa_django.workflows.services).
-- Parameters: workflow (bigint).
-- Storage (migration 0023): the workflow's jobs still waiting or running are in awa_job, its
--   finished ones in awa_job_done; the view awa_job_all cannot be locked (a UNION), so each table's
--   rows are locked by their own arm, each in id order.
-- Index: awa_job_workflow_idx, awa_job_done_workflow_idx (workflow_id, id) in each partition.
SELECT id, state
FROM (
    SELECT * FROM (SELECT id, state FROM awa_job WHERE workflow_id = %(workflow)s::bigint ORDER BY id FOR UPDATE) AS hot
    UNION ALL
    SELECT * FROM (SELECT id, state FROM awa_job_done WHERE workflow_id = %(workflow)s::bigint ORDER BY id FOR UPDATE) AS done
) AS locked
ORDER BY id
