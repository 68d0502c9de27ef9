-- acquire_leader_lease: take or renew a leadership lease in one compare-and-swap statement, on the
--   database clock (no worker's clock is trusted). Returns the row when the caller holds the lease
--   afterwards (it was free, expired, or already the caller's); no row when another worker holds it.
--   Pooler-safe: one autocommit statement, no session state (unlike a session advisory lock).
-- Parameters: name (text: the role, e.g. 'maintenance'), holder (uuid: the worker instance),
--   ttl (interval: how long the lease lasts without a renewal).
-- Index: the primary key (name).
-- Locking: INSERT … ON CONFLICT DO UPDATE locks the one row; the WHERE is evaluated on the locked,
--   latest version, so two workers racing for an expired lease cannot both win.
INSERT INTO awa_leader_lease AS lease (name, holder, term, acquired_at, renewed_at, expires_at)
VALUES (%(name)s::text, %(holder)s::uuid, 1, now(), now(), now() + %(ttl)s::interval)
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder,
       term = CASE WHEN lease.holder = EXCLUDED.holder THEN lease.term ELSE lease.term + 1 END,
       acquired_at = CASE WHEN lease.holder = EXCLUDED.holder THEN lease.acquired_at ELSE now() END,
       renewed_at = now(),
       expires_at = EXCLUDED.expires_at
 WHERE lease.holder = EXCLUDED.holder OR lease.expires_at <= now()
RETURNING term, expires_at
