-- 0008: the secret that keys the identities of API keys (see secret.go),
-- made once, here, under the migration lock: every replica on this database
-- reads the same secret, with no file to hand out. A -secret-file, when
-- given, is used instead (the row is then left unused).
CREATE TABLE key_identity_secret (
    id     INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    secret TEXT    NOT NULL CHECK (length(secret) >= 32)
);

-- gen_random_uuid (built in since PostgreSQL 13) draws from the server's
-- strong random source; two of them without their dashes are 64 hex digits
-- holding 244 random bits, as much as the 32 random bytes of a secret file.
INSERT INTO key_identity_secret (id, secret)
VALUES (1, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
