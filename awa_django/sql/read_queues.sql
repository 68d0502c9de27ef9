-- read_queues: every queue's settings (live reconfiguration re-reads them). No locks.
SELECT name, max_workers, min_workers, weight, rate_limit, rate_burst, paused,
       extract(epoch FROM deadline)::float8 AS deadline_seconds,
       extract(epoch FROM priority_aging)::float8 AS priority_aging_seconds
FROM awa_queue
