-- read_backend_pid: the Postgres backend serving this statement (the pooler probe of awa.W006:
--   two open sessions served by one backend reveal a transaction pooler in between).
-- Parameters: none.
-- Index: none.
-- Locking: none.
SELECT pg_backend_pid()
