-- roll_up_history: per minute, per kind and per queue, the jobs finalised in [start, stop):
-- completed, failed and cancelled counts; wait (run_at to the last attempt's start) and run (that
-- attempt's start to finalized_at) p50/p95 in seconds, over the jobs a worker attempted. Within a
-- minute only the `top` busiest kinds (and queues) keep their own row; the rest are summed under
-- the name '' (no kind or queue has an empty name), so no kind count can grow the table unbounded.
-- Parameters: start, stop (timestamptz, whole minutes), top (int).
-- Which minutes: from the watermark (awa_history_mark.closed_through) to the current one, every
-- round, until they are final. A job is stamped finalized_at with its finalising transaction's
-- now(), its start, and is read only once that transaction commits: a minute is final once it
-- ended HISTORY_GRACE seconds ago and no transaction open at read_open_transactions (run before
-- this statement in the round) started in it or before, but those open longer than
-- HISTORY_OPEN_TRANSACTION_MAX (worker/history.py, the close rule). So a job committed by a long
-- transaction (an atomic handler, a release cancelling dependents) is still in an open minute,
-- and is counted once, by the first round after its commit.
-- Index: awa_job_all's arms each by finish time, a range over the round's minutes only: the hot
-- table's finished leftovers through awa_job_finalized_idx (state, finalized_at) WHERE finished,
-- awa_job_done through awa_job_done_finalized_id_idx in each partition the range does not prune
-- (pin_history_reads, run before it in the round's transaction, keeps the planner off sequential
-- scans: so each round reads its own minutes' jobs, and a catch-up each finished job once).
-- Locking: plain reads (no row locks); run after delete_history_minutes under
-- lock_history_mark's row lock, in the same transaction, so the minutes are replaced, not added.
WITH finished AS (
    SELECT date_trunc('minute', finalized_at) AS minute,
           kind,
           queue,
           state,
           -- GREATEST skips NULLs: a job no worker attempted must give NULL, not 0.
           CASE WHEN attempted_at IS NOT NULL
                THEN EXTRACT(EPOCH FROM GREATEST(attempted_at - run_at, interval '0'))::float8 END AS wait,
           CASE WHEN attempted_at IS NOT NULL
                THEN EXTRACT(EPOCH FROM GREATEST(finalized_at - attempted_at, interval '0'))::float8 END AS run
    FROM awa_job_all
    WHERE state IN ('completed', 'failed', 'cancelled')
      AND finalized_at >= %(start)s::timestamptz
      AND finalized_at < %(stop)s::timestamptz
), sides AS (
    SELECT minute, 'kind'::varchar AS dimension, kind AS name, state, wait, run FROM finished
    UNION ALL
    SELECT minute, 'queue'::varchar, queue, state, wait, run FROM finished
), ranked AS (
    SELECT minute, dimension, name,
           row_number() OVER (PARTITION BY minute, dimension ORDER BY count(*) DESC, name) AS rank
    FROM sides
    GROUP BY minute, dimension, name
)
INSERT INTO awa_history (minute, dimension, name, completed, failed, cancelled, wait_p50, wait_p95, run_p50, run_p95)
SELECT s.minute,
       s.dimension,
       CASE WHEN r.rank <= %(top)s::int THEN s.name ELSE '' END AS bucket,
       count(*) FILTER (WHERE s.state = 'completed'),
       count(*) FILTER (WHERE s.state = 'failed'),
       count(*) FILTER (WHERE s.state = 'cancelled'),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY s.wait),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY s.wait),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY s.run),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY s.run)
FROM sides AS s
JOIN ranked AS r USING (minute, dimension, name)
GROUP BY s.minute, s.dimension, bucket
