-- read_applied_migrations: the names of an app's migrations recorded as applied (the readiness
--   probe, observability/probes.py: the schema the worker runs on is the one its code expects).
--   Also its database check: any answer proves the database reachable through the worker's pool.
-- Parameters: app (text: the app label, 'awa').
-- Index: django_migrations has none on app; the table holds one row per migration ever applied
--   (hundreds), read once per readiness check, every few seconds, off the claim path.
-- Locking: a plain read, no row locks.
SELECT name FROM django_migrations WHERE app = %(app)s::varchar
