-- notify_listener_ping: the LISTEN connection's health check, sent on that connection itself.
-- Parameters: channel (text, LISTEN_PING_CHANNEL, which the connection listens on), token (text,
--   fresh per check). The notification comes back to the same session once this commits; a
--   connection that does not answer, or whose echo does not arrive within the check interval,
--   is taken for dead (or half-open) and replaced.
-- Index: none (no table). Locking: none; pg_notify queues the message at commit (autocommit here).
SELECT pg_notify(%(channel)s::text, %(token)s::text)
