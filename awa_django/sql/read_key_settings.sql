-- read_key_settings: the fair-key settings of the queues named: each queue's key defaults and its
--   FairKey override rows (concurrency/keyconfig.py turns them into QueueKeySettings).
-- Parameters: queues (text[]): the queue names; a name with no Queue row gets the defaults (its
--   key_weight and key_max_running columns are NULL here), and FairKey rows count without one.
-- Returns: one row per (queue, override) pair, or one row with NULL key columns for a queue with
--   no overrides: name, key_weight, key_max_running, key, weight, max_running.
-- Index: awa_queue's primary key (name) and awa_fair_key_queue_key_uniq (queue, key).
-- Locking: a plain read, no locks (read on the reconfigure tick, like read_queues).
SELECT n.name, q.key_weight, q.key_max_running, k.key, k.weight, k.max_running
FROM unnest(%(queues)s::varchar[]) AS n(name)
LEFT JOIN awa_queue AS q ON q.name = n.name
LEFT JOIN awa_fair_key AS k ON k.queue = n.name
