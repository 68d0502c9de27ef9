-- delete_empty_workflows: the workflow rows among ids left without a job (after retention dropped
-- a partition holding their last jobs). Parameters: ids (bigint[]). Index: awa_workflow's primary
-- key; awa_job_workflow_idx and awa_job_done_workflow_idx through the view.
DELETE FROM awa_workflow AS w
WHERE w.id = ANY(%(ids)s::bigint[])
  AND NOT EXISTS (SELECT 1 FROM awa_job_all AS j WHERE j.workflow_id = w.id)
