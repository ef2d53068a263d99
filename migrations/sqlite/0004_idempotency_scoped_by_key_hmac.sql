-- 0004: an idempotency record was scoped by the SHA-256 digest of its API
-- key, an unsalted hash: whoever read the file (a backup, a copied disk)
-- could test guesses of a key against it. A record is now scoped by the
-- key's identity, the HMAC-SHA256 of that digest under the service's secret,
-- which is kept outside the database (README, "API keys"). SQL cannot
-- compute it without the secret, so the records made before are deleted: a
-- create sent with an Idempotency-Key before the upgrade and retried after it
-- is processed afresh (replays of at most one retention period, 24 hours by
-- default, are lost), and no record can ever be replayed to the wrong key.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys RENAME COLUMN api_key_sha256 TO api_key_hmac;
