-- copy_job_edges: a workflow's edges through COPY (Workflow.enqueue), in the caller's transaction,
-- after its jobs. Columns: upstream_id, downstream_id, name (the upstream's step name: how the
-- dependent reads its result), policy (0 on_success, 1 always). The primary key refuses a
-- duplicate edge (Workflow.enqueue merges them first).
COPY awa_job_edge (upstream_id, downstream_id, name, policy) FROM STDIN
