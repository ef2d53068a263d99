-- 0001: the schema of every release before versioned migrations. Those
-- releases applied it at each start with IF NOT EXISTS, so a database made
-- by any of them already holds all or part of it: the same statements adopt
-- such a file as version 1 without touching its rows, and create the
-- schema in an empty one.

CREATE TABLE IF NOT EXISTS pets (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    category_id INTEGER NOT NULL CHECK (category_id >= 1),
    status      TEXT    NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;

CREATE INDEX IF NOT EXISTS pets_status_listing ON pets (status, id, name, category_id);
-- The first release's narrower index, which pets_status_listing replaced.
DROP INDEX IF EXISTS pets_status_id;

CREATE TABLE IF NOT EXISTS idempotency_keys (
    api_key_sha256  BLOB    NOT NULL CHECK (length(api_key_sha256) = 32),
    idempotency_key TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    fingerprint     BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    pet_id          INTEGER NOT NULL REFERENCES pets (id),
    status          INTEGER NOT NULL,
    location        TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (api_key_sha256, idempotency_key)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS idempotency_keys_created_at ON idempotency_keys (created_at);
