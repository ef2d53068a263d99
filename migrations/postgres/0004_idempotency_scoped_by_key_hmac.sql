-- 0004: an idempotency record is scoped by its API key's identity, the
-- HMAC-SHA256 of the key's digest under the service's secret, kept outside
-- the database (see migrations/sqlite/0004 for why). SQL cannot compute it,
-- so the records made before are deleted: a keyed create retried across the
-- upgrade is processed afresh, and no record is ever replayed to the wrong
-- key.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys RENAME COLUMN api_key_sha256 TO api_key_hmac;
