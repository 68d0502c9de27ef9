-- release_ended_jobs: consume the out-edges of jobs a service function just ended (cancel_jobs,
--   discard_jobs, cancel_workflow), in its transaction: awa_release_jobs (migration 0012) makes
--   their dependents available, or cancels them (on_success edges), and tells their waiters.
-- Parameters: ids (bigint[]), states (text[]: the state each ended in; a discarded job counts as
--   cancelled). Call it once per job end, from the transaction that ended it: the rows are locked
--   by then, so no worker's write can end them again. Index: awa_job_edge's primary key.
SELECT awa_release_jobs(%(ids)s::bigint[], %(states)s::text[])
