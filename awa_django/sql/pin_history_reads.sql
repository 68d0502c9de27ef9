-- pin_history_reads: a rollup round reads finished jobs by their finish time only, whatever the
-- planner's estimates. A round reads an hour at most of a partition that can hold a day (its
-- width is retention.width_for's), or the hot table's and the DEFAULT partitions' leftovers:
-- where those minutes are a large part of a relation, the planner prefers reading it whole, and a
-- catch-up of N rounds then reads each finished job N times (issue 43). Without sequential scans
-- every arm of awa_job_all is read through its finished-time index (awa_job_finalized_idx,
-- awa_job_done_finalized_id_idx), each round over its own minutes, so a catch-up reads each
-- finished job once.
-- Parameters: none. Index: none. Locking: none; SET LOCAL lasts until the round's transaction ends.
SET LOCAL enable_seqscan = off
