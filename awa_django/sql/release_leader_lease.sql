-- release_leader_lease: a leader stopping gracefully gives its lease up, so another worker takes
--   over on its next round instead of waiting for the expiry.
-- Parameters: name (text), holder (uuid).
-- Index: the primary key (name).
-- Locking: the one row, and only while the caller still holds it (a lease taken over is left alone).
DELETE FROM awa_leader_lease WHERE name = %(name)s::text AND holder = %(holder)s::uuid
